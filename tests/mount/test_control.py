"""A real mount's control socket under hostile peers: garbage, wrong types, a huge line
and a half-closed peer each get an error answer or a close, and the mount keeps serving."""

from __future__ import annotations

import socket
import time

import pytest
import trio

from memfs.control import client, protocol, registry
from tests.support.mount import MountProcess

pytestmark = pytest.mark.deadline(120)


def _raw(sock_path: str, payload: bytes, *, half_close: bool = False) -> bytes:
    """What the daemon sends back to `payload` before it closes the connection."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(15)
        sock.connect(sock_path)
        try:
            sock.sendall(payload)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        except BrokenPipeError:
            pass  # it stopped reading a huge line; its answer is still there to read
        got = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            got += chunk
    return got


def test_garbage_and_half_closed_peers_are_answered(quiet: MountProcess) -> None:
    info = registry.find_mount(str(quiet.mountpoint))
    assert info is not None
    sock = str(info["socket"])
    cases = [
        (b"\xff\xfe not json\n", "not UTF-8"),
        (b"[1,2]\n", "JSON object"),
        (b'{"op": 7}\n', "unknown op"),
        (b'{"op": "conflicts", "what": "burn"}\n', "must be one of"),
        (b'{"op": "history", "path": ["a"]}\n', "wrong type"),
    ]
    for payload, reason in cases:
        answer = protocol.parse_answer(_raw(sock, payload), protocol.StatusAnswer)
        assert isinstance(answer, protocol.ErrorAnswer), (payload, answer)
        assert reason in answer.error, (payload, answer)
    huge = protocol.parse_answer(
        _raw(sock, b"x" * (protocol.MAX_REQUEST * 4)), protocol.StatusAnswer
    )
    assert huge == protocol.error(f"line longer than {protocol.MAX_REQUEST} bytes")
    half = protocol.parse_answer(
        _raw(sock, b'{"op": "status"', half_close=True), protocol.StatusAnswer
    )
    assert half == protocol.error("the request ended without a newline")
    assert _raw(sock, b"", half_close=True) == b""  # nothing asked: closed, no answer

    # The mount keeps serving: files, and both front ends of the one client.
    (quiet.mountpoint / "a.md").write_text("still here\n")
    status = client.request(info, protocol.Status(), timeout=10)
    assert isinstance(status, protocol.StatusAnswer), status
    assert status.ok is True and status.mountpoint == str(quiet.mountpoint)

    async def ask() -> protocol.StatusAnswer | protocol.ErrorAnswer:
        with trio.fail_after(30):
            return await client.arequest(info, protocol.Sync())

    synced = trio.run(ask)
    assert isinstance(synced, protocol.StatusAnswer) and synced.ok is True, synced
    last = synced.stores[0].last_pass
    assert last is not None and last.pushed == 1
    assert quiet.proc is not None and quiet.proc.poll() is None
    log = quiet.log()
    assert "Traceback" not in log and " ERROR " not in log, log
    assert log.count("control request refused") == len(cases) + 2, log


def test_a_silent_peer_does_not_block_others(quiet: MountProcess) -> None:
    info = registry.find_mount(str(quiet.mountpoint))
    assert info is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(str(info["socket"]))
        silent.sendall(b'{"op": "sta')  # and then nothing, for a while
        t0 = time.monotonic()
        answer = client.request(info, protocol.Status(), timeout=10)
        assert answer.ok is True
        assert time.monotonic() - t0 < 5
