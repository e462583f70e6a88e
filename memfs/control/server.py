"""Serves one mount's control socket: one request line in, one answer line out.

The daemon hands over one table, op -> handler (memfs/mount/answers.py). Whatever a
peer sends is answered or the connection closed, and nothing it does reaches the daemon
as an exception: garbage, wrong types and unknown ops get an error answer; a line longer
than MAX_REQUEST is answered and cut off; a peer that sends nothing whole within
REQUEST_READ_TIMEOUT is dropped; one that half-closes before a newline gets an error
answer on its still-open side; one that hangs up before its answer only costs a log line.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import trio

from memfs.control import registry
from memfs.control.codec import to_wire
from memfs.control.protocol import (
    MAX_REQUEST,
    Answer,
    LineBuffer,
    ProtocolError,
    Request,
    encode,
    error,
    parse_request,
)

log = logging.getLogger("memfs.control")

# A peer that connects and sends no full request line within this bound is dropped.
REQUEST_READ_TIMEOUT = 10.0

Handler = Callable[[Any], Awaitable[Answer]]


class ControlServer:
    """Serves one mount's control socket until cancelled; removes its files after."""

    def __init__(
        self, mountpoint: str, info: dict[str, Any], handlers: Mapping[str, Handler]
    ) -> None:
        # Already resolved by the caller: a daemon must never stat its own mount point
        # from the event loop, or the kernel's request back to it deadlocks.
        self.mountpoint = mountpoint
        self.sock_path = registry.socket_path(mountpoint)
        self.info = {
            **info,
            "mountpoint": self.mountpoint,
            "pid": os.getpid(),
            "socket": str(self.sock_path),
        }
        self.handlers = dict(handlers)
        self._in_flight = 0
        self._idle = trio.Event()
        self._idle.set()

    async def wait_idle(self) -> None:
        """Until every request received so far has had its answer sent."""
        await self._idle.wait()

    def publish(self) -> None:
        """This mount's registry entry, before its socket is bound: a recovery takes the
        dead daemon's entry over this way (`memfs/mount/overmount.py`)."""
        registry.publish(self.info)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.sock_path.unlink(missing_ok=True)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        await sock.bind(str(self.sock_path))
        os.chmod(self.sock_path, 0o600)
        sock.listen(16)
        info_path = registry.publish(self.info)
        try:
            task_status.started()
            await trio.serve_listeners(self._serve_one, [trio.SocketListener(sock)])
        finally:
            self.sock_path.unlink(missing_ok=True)
            info_path.unlink(missing_ok=True)

    async def _serve_one(self, stream: trio.SocketStream) -> None:
        self._in_flight += 1
        self._idle = trio.Event()
        try:
            async with stream:
                answer = await self._answer(stream)
                if answer is not None:
                    await stream.send_all(encode(to_wire(answer)))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            # The peer timed out, was interrupted (Ctrl-C) or hung up: its request (a
            # sync pass, an unmount) goes on; only the answer has nowhere to go.
            log.info(
                "control peer went away before its answer mountpoint=%s error=%s",
                self.mountpoint,
                type(e).__name__,
            )
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def _read(self, stream: trio.SocketStream) -> bytes | None:
        """The request line; None if the peer sent nothing whole in time (dropped).
        Raises ProtocolError for a line that is too long or cut short."""
        buf = LineBuffer(MAX_REQUEST)
        with trio.move_on_after(REQUEST_READ_TIMEOUT):
            while True:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    if buf.pending:
                        raise ProtocolError("the request ended without a newline")
                    return None
                line = buf.feed(chunk)
                if line is not None:
                    return line
        if buf.pending:
            log.warning(
                "control request dropped: incomplete mountpoint=%s bytes=%d",
                self.mountpoint,
                buf.pending,
            )
        return None

    async def _answer(self, stream: trio.SocketStream) -> Answer | None:
        try:
            line = await self._read(stream)
            if line is None:
                return None
            request = parse_request(line)
        except ProtocolError as e:
            log.warning("control request refused mountpoint=%s error=%s", self.mountpoint, e)
            return error(str(e))
        return await self._dispatch(request)

    async def _dispatch(self, request: Request) -> Answer:
        handler = self.handlers.get(request.op)
        if handler is None:
            return error(f"this mount does not serve {request.op!r}")
        try:
            return await handler(request)
        except Exception as e:  # a handler's bug must not end the daemon
            log.warning(
                "control request failed mountpoint=%s op=%s error=%s",
                self.mountpoint,
                request.op,
                e,
            )
            return error(f"{request.op} failed: {e}")
