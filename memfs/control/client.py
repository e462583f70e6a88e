"""The one client of a daemon's control socket, with a blocking and an async front end.

`request` serves the CLI (plain sockets: a command needs no event loop); `arequest`
serves the worker adapter on the SDK's anyio loop and any trio code, and is cancellable.
Both send one request line and read one answer line through protocol.py's framing.
Reaching the daemon can fail (OSError, TimeoutError: the caller says what goes on); a
daemon that hangs up, answers garbage or an answer that does not fit the request's
answer type (protocol.py) gives an error answer, never an exception.
"""

from __future__ import annotations

import socket
from typing import Any

import anyio

from memfs.control.protocol import (
    MAX_ANSWER,
    A,
    Asks,
    ErrorAnswer,
    LineBuffer,
    LineTooLong,
    encode_request,
    error,
    parse_answer,
)


def _socket_of(info: dict[str, Any] | str) -> str:
    return info if isinstance(info, str) else str(info["socket"])


def _finish(req: Asks[A], buf: LineBuffer, line: bytes | None) -> A | ErrorAnswer:
    if line is not None:
        answer: A | ErrorAnswer = parse_answer(line, req.answer, req.op)
        return answer
    if buf.pending:
        return error("the daemon hung up in the middle of its answer")
    return error("the daemon hung up without an answer")


def request(info: dict[str, Any] | str, req: Asks[A], timeout: float = 60.0) -> A | ErrorAnswer:
    """The daemon's answer to `req` (`info` is a registry entry or a socket path);
    `timeout` bounds connecting and each wait for bytes."""
    buf = LineBuffer(MAX_ANSWER)
    line = None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(_socket_of(info))
        sock.sendall(encode_request(req))
        try:
            while line is None:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                line = buf.feed(chunk)
        except LineTooLong as e:
            return error(f"the daemon sent a broken answer: {e}")
    return _finish(req, buf, line)


async def arequest(info: dict[str, Any] | str, req: Asks[A]) -> A | ErrorAnswer:
    """`request` for an event loop (trio or asyncio, through anyio); bound it with the
    caller's own cancel scope (`anyio.fail_after`, `trio.move_on_after`)."""
    buf = LineBuffer(MAX_ANSWER)
    line = None
    async with await anyio.connect_unix(_socket_of(info)) as stream:
        await stream.send(encode_request(req))
        try:
            while line is None:
                try:
                    chunk = await stream.receive(65536)
                except anyio.EndOfStream:
                    break
                line = buf.feed(chunk)
        except LineTooLong as e:
            return error(f"the daemon sent a broken answer: {e}")
    return _finish(req, buf, line)
