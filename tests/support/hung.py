"""A server that accepts TCP connections on 127.0.0.1 and never answers a byte.

The kernel completes the handshake, a thread accepts and holds every connection open
until `close()`: the peer of tests for connect and first-byte timeouts.
"""

from __future__ import annotations

import socket
import threading


class HungServer:
    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            self._held.append(conn)  # read nothing, answer nothing

    def close(self) -> None:
        self._closing.set()
        self._thread.join(5)
        self._listener.close()
        for conn in self._held:
            conn.close()

    def __enter__(self) -> HungServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
