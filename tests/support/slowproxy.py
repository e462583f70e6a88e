"""A TCP proxy on 127.0.0.1 that makes a healthy server slow on demand.

Every chunk the client sends waits `delay` seconds before it goes upstream, so each
request (its head and its body) costs that much more; set `delay` at any time. The
store itself stays fast and correct: a test can watch it directly, past the proxy.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class SlowProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.delay = 0.0
        self.requests = 0  # client chunks forwarded (about one a request)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, slow: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := src.recv(65536):
                if slow:
                    self.requests += 1
                    time.sleep(self.delay)
                dst.sendall(chunk)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closing.set()
        self._listener.close()
        with self._lock:
            for s in self._sockets:
                with contextlib.suppress(OSError):
                    s.close()

    def __enter__(self) -> SlowProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
