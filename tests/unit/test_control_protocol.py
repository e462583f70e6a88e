"""The control protocol's framing and parser (memfs/control/protocol.py) under garbage:
every input becomes a typed request or a ProtocolError, never another exception."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.control import client, protocol, registry
from memfs.control.codec import ABSENT, DecodeError, decode, to_wire
from memfs.control.protocol import LineBuffer, LineTooLong, ProtocolError, parse_request
from memfs.control.server import ControlServer

EXAMPLES = [
    protocol.Status(),
    protocol.Sync(),
    protocol.Flush(),
    protocol.Restore(sync=False),
    protocol.History(what="show", path="/a/b.md", version="~1"),
    protocol.History(path="/ü.md"),
    protocol.Conflicts(what="drop", id="abc"),
    protocol.Progress(),
    protocol.Unmount(),
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=10,
)


@pytest.mark.parametrize("request_", EXAMPLES, ids=lambda r: r.op)
def test_every_request_round_trips(request_: protocol.Request) -> None:
    line = protocol.encode_request(request_)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert parse_request(line[:-1]) == request_


@given(st.binary(max_size=300))
@settings(max_examples=500)
def test_any_bytes_parse_or_are_refused(data: bytes) -> None:
    try:
        parsed = parse_request(data)
    except ProtocolError as e:
        assert str(e)
    else:
        assert type(parsed) in protocol.REQUESTS.values()


@given(st.sampled_from(sorted(protocol.REQUESTS)), st.dictionaries(st.text(), json_values))
@settings(max_examples=500)
def test_wrong_fields_and_types_are_refused_with_a_reason(op: str, fields: dict[str, Any]) -> None:
    line = json.dumps({**fields, "op": op}).encode()
    try:
        parsed = parse_request(line)
    except ProtocolError as e:
        assert op in str(e) or "unknown" in str(e)
        return
    # Whatever parsed has exactly the wire fields it was given, each of the right kind.
    assert parsed.op == op
    wire = asdict(parsed)
    given = {k: v for k, v in fields.items() if k != "op"}
    assert {k: wire[k] for k in given} == given


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"op": 7}', "unknown op 'int'"),
        (b'{"op": "format-disk"}', "unknown op 'format-disk'"),
        (b'{"op": "history", "path": 3}', "wrong type"),
        (b'{"op": "restore", "sync": "yes"}', "wrong type"),
        (b'{"op": "conflicts", "what": "burn"}', "must be one of"),
        (b'{"op": "status", "extra": 1}', "unknown field"),
        (b"[" * 100000, "not JSON"),
    ],
)
def test_garbage_gets_a_clear_reason(line: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        parse_request(line)


@given(st.lists(st.binary(max_size=50), max_size=20), st.integers(1, 200))
def test_framing_gives_the_first_line_whatever_the_chunks(chunks: list[bytes], limit: int) -> None:
    data = b"".join(chunks)
    buf = LineBuffer(limit)
    got = None
    try:
        for chunk in chunks:
            got = buf.feed(chunk)
            if got is not None:
                break
    except LineTooLong:
        assert len(data.split(b"\n", 1)[0]) > limit
        return
    if b"\n" in data:
        assert got == data.split(b"\n", 1)[0]
    else:
        assert got is None and buf.pending == len(data)


def test_a_huge_line_is_refused_before_it_is_all_read() -> None:
    buf = LineBuffer(protocol.MAX_REQUEST)
    with pytest.raises(LineTooLong):
        for _ in range(protocol.MAX_REQUEST // 1000 + 2):
            buf.feed(b"x" * 1000)
    assert buf.pending <= protocol.MAX_REQUEST + 1000


@given(st.binary(max_size=200))
def test_any_answer_line_becomes_an_answer(data: bytes) -> None:
    answer = protocol.parse_answer(data, protocol.StatusAnswer, "status")
    assert isinstance(answer, protocol.StatusAnswer | protocol.ErrorAnswer)
    if isinstance(answer, protocol.ErrorAnswer):
        assert answer.error


# -- answers ----------------------------------------------------------------------------

COPY = protocol.ConflictCopy(
    path="/a.md", copy="/c/conflicts/a.md~1", at="2026-01-01T00:00:00Z", why=None
)
PASS = protocol.LastPass(
    at="2026-01-01T00:00:00Z",
    duration_s=0.25,
    cpu_ms=3.5,
    outcome="ok",
    error=None,
    pulled=1,
    pushed=2,
    deleted=0,
    conflicts=1,
    conflict_copies=[COPY],
    listed=False,
    kind="feed",
    unsettled=["/x.md"],
)
STORE = protocol.StoreStatus(
    memory_store_id="memstore_1",
    name="notes",
    mount_path="/mnt",
    access="read_write",
    interval_s=15.0,
    deletions="enabled",
    memories=3,
    bytes=120,
    dirty=1,
    refused=1,
    conflicts=1,
    pending_deletes=1,
    missing_content=0,
    offline=False,
    conflict_copies=[
        protocol.ConflictCopy("/b.md", "/c/b.md~1", "2026-01-01T00:00:00Z", "too big")
    ],
    refused_files=[protocol.RefusedFile("/bin.dat", "not UTF-8", True, "2026-01-01T00:01:00Z")],
    dirty_files=["/d.md"],
    excluded=0,
    pending_delete_paths=["/gone.md", None],
    last_pass=PASS,
    next_pass_at=None,
    learns_by="watch",
    last_heard_at="2026-01-01T00:00:00Z",
    passes={"feed": 3, "full": 1},
    feed_missed=0,
)
STATUS = protocol.StatusAnswer(
    ok=True,
    mountpoint="/mnt",
    pid=42,
    stores=[STORE],
    fuse_requests={"getattr": 7},
    pyfuse3=protocol.Pyfuse3Build("3.4.0", True, True, True, True, True, False, True, 0),
    negative_entries={"entries": 0, "hits": 2},
    xattrs=True,
    close_watch=None,
)
VERSION = protocol.HistoryVersion(
    id="memver_1",
    memory_id="mem_1",
    operation="created",
    path="/a.md",
    created_at="2026-01-01T00:00:00Z",
    created_by={"type": "api_actor", "api_key_id": "apikey_x"},
    actor="api:apikey_x",
    content_sha256="ab" * 32,
    content_size_bytes=5,
    redacted_at=None,
)
KEPT = protocol.KeptCopy(
    id="0123abcd",
    memory_store_id="memstore_1",
    path="/a.md",
    at="2026-01-01T00:00:00Z",
    copy="/c/conflicts/a.md~1",
    size=5,
    memory_id="mem_1",
    local_sha256=None,
    remote_sha256=None,
    remote_version="memver_2",
    restored_at=None,
)
HISTORY = protocol.HistoryAnswer(
    ok=True,
    memory_store_id="memstore_1",
    path="/a.md",
    memory_id="mem_1",
    access="read_write",
    local=protocol.LocalFile(True, "dirty", "cd" * 32, "mem_1", None, True, None),
    versions=[VERSION],
)
# Every answer type, and each shape an op's answer takes (absent keys, unions).
ANSWERS: list[Any] = [
    STATUS,
    replace(STATUS, ok=False, close_watch={"events": 1}, stores=[replace(STORE, last_pass=None)]),
    protocol.PushAnswer(
        ok=False, outcome="conflict", path="/a.md", version=None, why="", copy="/c"
    ),
    protocol.FlushAnswer(ok=True, stores={"memstore_1": protocol.Flushed("ok", None, 2)}),
    protocol.RestoreAnswer(ok=True, restored={"memstore_1": 0}),
    HISTORY,
    replace(
        HISTORY,
        local=protocol.NoLocalFile(False, "pending-delete", "mem_1"),
        version=VERSION,
        content="hi\n",
    ),
    replace(HISTORY, local=None, memory_id=None, versions=[]),
    protocol.ConflictsAnswer(
        ok=True, mountpoint="/mnt", conflicts=[replace(KEPT, local_path="/mnt/a.md")]
    ),
    protocol.ConflictsAnswer(
        ok=True,
        conflict=replace(KEPT, local_path="/mnt/a.md"),
        content_b64="aGkK",
        local=protocol.CopyTarget(True, "clean", None, False),
        access="read_only",
    ),
    protocol.ConflictsAnswer(ok=True, conflict=KEPT, local=protocol.NoCopyTarget(False)),
    protocol.ConflictsAnswer(ok=True, dropped=KEPT),
    protocol.ProgressAnswer(
        ok=True,
        closing=False,
        stores=[
            protocol.StoreProgress(
                "memstore_1", "", "", 0, None, protocol.PhaseEnded("pushing", 3, 3)
            ),
            protocol.StoreProgress("memstore_2", "b", "pulling", 1, None),
        ],
    ),
    protocol.UnmountAnswer(
        ok=False,
        seconds=1.5,
        unpushed={"memstore_1": ["/d.md"]},
        refused={"memstore_1": [protocol.RefusedPath("/bin.dat", "not UTF-8")]},
        stopped=False,
        outcomes={"memstore_1": "ok"},
    ),
    protocol.error("no such thing"),
    protocol.ErrorAnswer(ok=False, error="offline", unreachable=True),
    protocol.ErrorAnswer(ok=False, error="no copy", missing=True),
]


def test_every_op_has_an_answer_type_with_examples() -> None:
    assert {cls.answer for cls in protocol.REQUESTS.values()} <= {type(a) for a in ANSWERS}
    assert protocol.Status.answer is protocol.Sync.answer is protocol.StatusAnswer
    assert protocol.Unmount.answer is protocol.UnmountAnswer


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: type(a).__name__)
def test_every_answer_round_trips(answer: Any) -> None:
    """What the daemon sends (`to_wire`, then the framing) the client decodes back to
    the same typed answer; absent keys stay absent."""
    line = protocol.encode(to_wire(answer))
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert protocol.parse_answer(line[:-1], type(answer)) == answer
    wire = json.loads(line)
    assert decode(type(answer), wire) == answer
    left_off = [
        f.name for f in fields(answer) if f.metadata == ABSENT and getattr(answer, f.name) is None
    ]
    assert not set(left_off) & set(wire)


def test_the_status_wire_is_unchanged() -> None:
    """The keys `memfs status --json` has always had, in order (other tools read them)."""
    wire = to_wire(STATUS)
    assert list(wire) == [
        "ok", "mountpoint", "pid", "stores", "fuse_requests", "pyfuse3",
        "negative_entries", "xattrs", "close_watch",
    ]  # fmt: skip
    assert list(wire["stores"][0]) == [
        "memory_store_id", "name", "mount_path", "access", "interval_s", "deletions",
        "memories", "bytes", "dirty", "refused", "conflicts", "pending_deletes",
        "missing_content", "offline", "conflict_copies", "refused_files", "dirty_files",
        "excluded", "pending_delete_paths", "last_pass", "next_pass_at", "learns_by",
        "last_heard_at", "passes", "feed_missed",
    ]  # fmt: skip
    assert list(wire["stores"][0]["last_pass"]) == [
        "at", "duration_s", "cpu_ms", "outcome", "error", "pulled", "pushed", "deleted",
        "conflicts", "conflict_copies", "listed", "kind", "unsettled",
    ]  # fmt: skip
    assert wire["stores"][0]["refused_files"][0] == {
        "path": "/bin.dat", "why": "not UTF-8", "transient": True,
        "next_retry": "2026-01-01T00:01:00Z",
    }  # fmt: skip


def _line(wire: Any) -> bytes:
    return json.dumps(wire).encode()


@pytest.mark.parametrize("answer", ANSWERS[:-3], ids=lambda a: type(a).__name__)
def test_an_answer_missing_a_field_is_a_clear_error(answer: Any) -> None:
    """A daemon's answer without a field its type requires (another memfs version, a
    bug) is an error answer naming the field, never a KeyError in the command."""
    wire = to_wire(answer)
    optional = {f.name for f in fields(answer) if f.default is None}  # only some carry them
    for name in [k for k in wire if k != "ok" and k not in optional]:
        broken = {k: v for k, v in wire.items() if k != name}
        got = protocol.parse_answer(_line(broken), type(answer), "op")
        assert isinstance(got, protocol.ErrorAnswer), name
        assert f"the daemon's op answer has no field {name!r}" in got.error


def test_a_nested_missing_or_mistyped_field_is_named_with_its_place() -> None:
    wire = to_wire(STATUS)
    del wire["stores"][0]["memories"]
    got = protocol.parse_answer(_line(wire), protocol.StatusAnswer, "status")
    assert got == protocol.error(
        "the daemon's status answer.stores[0] has no field 'memories' "
        "(a daemon of another memfs version?)"
    )
    wire = to_wire(STATUS)
    wire["stores"][0]["last_pass"]["pushed"] = "2"
    got = protocol.parse_answer(_line(wire), protocol.StatusAnswer, "status")
    assert isinstance(got, protocol.ErrorAnswer)
    assert "stores[0].last_pass.pushed is str, not an integer" in got.error
    wire = to_wire(STATUS)
    wire["ok"] = False  # a failed `sync` pass keeps the status schema: not an error answer
    assert protocol.parse_answer(_line(wire), protocol.StatusAnswer) == replace(STATUS, ok=False)
    with pytest.raises(DecodeError, match=r"answer.local.exists is 'yes', not one of \(True,\)"):
        decode(protocol.HistoryAnswer, {**to_wire(HISTORY), "local": {"exists": "yes"}})


def test_the_daemon_serves_every_op_of_the_protocol() -> None:
    from memfs.mount.answers import Answers

    table = Answers.table(Answers.__new__(Answers))  # the op table names no state
    assert table.keys() == protocol.REQUESTS.keys()


async def _serve(tmp_path: Path, handlers: dict[str, Any], peer: Any) -> Any:
    server = ControlServer(str(tmp_path / "mnt"), {}, handlers)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        result = await peer(str(server.sock_path))
        nursery.cancel_scope.cancel()
    return result


def test_server_and_both_clients(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler's answer reaches both front ends; a handler's bug becomes an error
    answer; raw garbage is answered on the same connection."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))

    async def status(_: protocol.Status) -> protocol.StatusAnswer:
        return STATUS

    async def sync(_: protocol.Sync) -> dict[str, Any]:
        raise RuntimeError("a bug")

    async def progress(_: protocol.Progress) -> dict[str, Any]:
        return {"ok": True, "closing": False}  # a daemon's answer without `stores`

    async def peer(sock: str) -> list[Any]:
        out: list[Any] = [await client.arequest(sock, protocol.Status())]
        out.append(await trio.to_thread.run_sync(client.request, sock, protocol.Sync()))
        out.append(await trio.to_thread.run_sync(client.request, sock, protocol.Flush()))
        out.append(await client.arequest(sock, protocol.Progress()))

        def raw() -> Any:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
                s.sendall(b'{"op": "status"')
                s.shutdown(socket.SHUT_WR)  # half-closed, mid-line
                return protocol.parse_answer(s.makefile("rb").readline(), protocol.StatusAnswer)

        out.append(await trio.to_thread.run_sync(raw))
        return out

    handlers = {"status": status, "sync": sync, "progress": progress}
    got = trio.run(_serve, tmp_path, handlers, peer)
    assert got[0] == STATUS
    assert got[1] == protocol.error("sync failed: a bug")
    assert got[2] == protocol.error("this mount does not serve 'flush'")
    assert got[3] == protocol.error(
        "the daemon's progress answer has no field 'stores' (a daemon of another memfs version?)"
    )
    assert got[4] == protocol.error("the request ended without a newline")
    assert not list(registry.runtime_dir().iterdir())  # socket and entry removed after


def test_a_daemon_of_an_older_memfs_still_answers_status() -> None:
    """A field added later has a default: a daemon started before it (still running
    after an upgrade) answers `status` without it, and the answer still decodes."""
    wire = to_wire(STATUS)
    del wire["close_watch"]
    assert protocol.parse_answer(_line(wire), protocol.StatusAnswer) == STATUS


def test_kept_copy_answer_declares_the_kept_record_field_for_field() -> None:
    # control/ may not import state/, so the answer names conflicts.Kept's fields again;
    # mount/answers.py builds one from the other by its fields, in this order
    from memfs.state.conflicts import Kept

    record = [(f.name, str(f.type)) for f in fields(Kept)]
    answer = [(f.name, str(f.type)) for f in fields(protocol.KeptCopy)]
    assert answer == [*record, ("local_path", "str | None")]
