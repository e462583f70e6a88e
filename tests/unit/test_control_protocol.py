"""The control protocol's framing and parser (memfs/control/protocol.py) under garbage:
every input becomes a typed request or a ProtocolError, never another exception."""

from __future__ import annotations

import json
import socket
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from memfs.control import client, protocol, registry
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
    answer = protocol.parse_answer(data)
    assert isinstance(answer["ok"], bool)
    if not answer["ok"]:
        assert isinstance(answer.get("error", ""), str)


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

    async def status(_: protocol.Status) -> dict[str, Any]:
        return {"ok": True, "pid": 1}

    async def sync(_: protocol.Sync) -> dict[str, Any]:
        raise RuntimeError("a bug")

    async def peer(sock: str) -> list[dict[str, Any]]:
        out = [await client.arequest(sock, protocol.Status())]
        out.append(await trio.to_thread.run_sync(client.request, sock, protocol.Sync()))
        out.append(await trio.to_thread.run_sync(client.request, sock, protocol.Flush()))

        def raw() -> dict[str, Any]:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
                s.sendall(b'{"op": "status"')
                s.shutdown(socket.SHUT_WR)  # half-closed, mid-line
                return protocol.parse_answer(s.makefile("rb").readline())

        out.append(await trio.to_thread.run_sync(raw))
        return out

    got = trio.run(_serve, tmp_path, {"status": status, "sync": sync}, peer)
    assert got[0] == {"ok": True, "pid": 1}
    assert got[1] == {"ok": False, "error": "sync failed: a bug"}
    assert got[2] == {"ok": False, "error": "this mount does not serve 'flush'"}
    assert got[3] == {"ok": False, "error": "the request ended without a newline"}
    assert not list(registry.runtime_dir().iterdir())  # socket and entry removed after
