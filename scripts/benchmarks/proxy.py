"""A counting HTTP proxy on 127.0.0.1: how many requests of which kind, and the bytes."""

from __future__ import annotations

import collections
import contextlib
import socket
import threading
from typing import Any


class CountingProxy:
    """A loopback TCP proxy in front of `memfs serve`: counts requests and bytes.

    It parses the client->server HTTP/1.1 stream just enough (request line, headers,
    Content-Length body) to name every request; responses are counted as raw bytes.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        self.bytes_up = 0
        self.bytes_down = 0
        self.unparsed = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self.sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        down = threading.Thread(target=self._pump_down, args=(upstream, client), daemon=True)
        down.start()
        buf = bytearray()
        body_left = 0
        parsing = True
        try:
            while True:
                data = client.recv(65536)
                if not data:
                    break
                upstream.sendall(data)
                with self.lock:
                    self.bytes_up += len(data)
                if not parsing:
                    continue
                buf += data
                while True:
                    if body_left:
                        take = min(body_left, len(buf))
                        del buf[:take]
                        body_left -= take
                        if body_left:
                            break
                    head = _take_head(buf)
                    if head is None:
                        break
                    method, target, length, chunked = head
                    with self.lock:
                        self.requests.append((method, target))
                        if chunked:
                            self.unparsed += 1
                    if chunked:
                        parsing = False
                        break
                    body_left = length
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)
            down.join(timeout=30)
            client.close()
            upstream.close()

    def _pump_down(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                client.sendall(data)
                with self.lock:
                    self.bytes_down += len(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)

    def mark(self) -> tuple[int, int, int]:
        with self.lock:
            return len(self.requests), self.bytes_up, self.bytes_down

    def since(self, mark: tuple[int, int, int]) -> dict[str, Any]:
        with self.lock:
            reqs = self.requests[mark[0] :]
            up, down = self.bytes_up - mark[1], self.bytes_down - mark[2]
        kinds = collections.Counter(classify(m, t) for m, t in reqs)
        return {
            "requests": len(reqs),
            "bytes_up": up,
            "bytes_down": down,
            "by_kind": dict(sorted(kinds.items())),
            "content_downloads": kinds["get_memory"] + kinds["list_full"],
        }


def classify(method: str, target: str) -> str:
    path, _, query = target.partition("?")
    parts = path.strip("/").split("/")
    if len(parts) >= 4 and parts[3] == "memories":
        if len(parts) == 4:
            if method == "GET":
                return "list_full" if "view=full" in query else "list_basic"
            return "create" if method == "POST" else f"{method.lower()}_memories"
        return {"GET": "get_memory", "POST": "update", "DELETE": "delete"}.get(method, "other")
    if len(parts) >= 4 and parts[3] == "memory_versions":
        return "versions"
    if len(parts) >= 5 and parts[3:5] == ["memfs", "watch"]:
        return "watch"
    if len(parts) == 3 and parts[1] == "memory_stores":
        return "get_store" if method == "GET" else "store_other"
    return "other"


def _take_head(buf: bytearray) -> tuple[str, str, int, bool] | None:
    """Take one request head off `buf`: (method, target, Content-Length, chunked?), or
    None while the head is not complete."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = bytes(buf[:end]).decode("latin-1").split("\r\n")
    del buf[: end + 4]
    method, target = ([*head[0].split(" "), "", ""])[:2]
    length = 0
    chunked = False
    for h in head[1:]:
        k, _, v = h.partition(":")
        k = k.strip().lower()
        if k == "content-length":
            length = int(v.strip())
        elif k == "transfer-encoding" and "chunked" in v.lower():
            chunked = True
    return method, target, length, chunked
