"""A hostile Memory Stores server on 127.0.0.1 that lies as the test tells it to.

Only the read side of the API a mount needs: the store, the listing in both views and
one memory; other methods answer 500, other routes 404 (so there is no head: every
pass lists). `extra` is served after the generated listing exactly as given (any JSON:
a duplicate id, a size of 2^63), and retrieved by its id like the others.

For the size limits (issue 24 item 4): `generated` memories are listed after those, made
up per page so 100,000 of them cost the test nothing; `huge` streams a memory's content
(`a` repeated, id -> bytes) without holding it; `page_size` overrides every page's
length whatever `limit` was asked.

For the watch (issue 35 item 4): with `watch_bytes` set, memfs serve's watch route
answers `{"head": "aaa…"}` of that many bytes, streamed without a length (else 404,
as on the hosted API); `watches` counts them.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

NOT_FOUND = b'{"type":"error","error":{"type":"not_found_error","message":"no"}}'


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class Hostile:
    """A tiny Memory Stores API on http.server that lies as the test tells it to.

    `memories`: id -> {"path", "content", and optionally "sha"/"size" overrides}.
    `behaviour`: id -> "garbage" | "html" | "hang" for the retrieve call;
    `mode`: "ok" | "garbage" | "hang" for every request.
    `extra`: raw listing items served after the memories, as they are.
    `listings`: how many listings (first pages) were asked for: one per pass.
    """

    def __init__(self, store_id: str = "memstore_hostile") -> None:
        self.store_id = store_id
        self.memories: dict[str, dict[str, Any]] = {}
        self.behaviour: dict[str, str] = {}
        self.mode = "ok"
        self.release = threading.Event()
        self.requests = 0
        self.extra: list[Any] = []
        self.listings = 0
        self.retrieved: list[str] = []  # memory ids whose retrieve call has arrived
        self.generated = 0
        self.huge: dict[str, int] = {}
        self.page_size: int | None = None
        self.watch_bytes = 0
        self.watches = 0
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                hostile.handle(self)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                hostile.handle(self)

            def do_DELETE(self) -> None:
                hostile.handle(self)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Hostile:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def add(self, path: str, content: str, **extra: Any) -> str:
        mid = f"mem_{len(self.memories):06d}"
        self.memories[mid] = {"path": path, "content": content, **extra}
        return mid

    def view(self, mid: str, full: bool) -> dict[str, Any]:
        m = self.memories[mid]
        obj = {
            "type": "memory",
            "id": mid,
            "memory_store_id": self.store_id,
            "path": m["path"],
            "content_sha256": m.get("sha", sha(m["content"])),
            "content_size_bytes": m.get("size", len(m["content"].encode("utf-8", "surrogatepass"))),
            "memory_version_id": f"memver_{mid}",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
        if full:
            obj["content"] = m["content"]
        return obj

    def send(self, h: BaseHTTPRequestHandler, status: int, body: bytes) -> None:
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(body)))
        h.send_header("request-id", "req_hostile")
        h.end_headers()
        h.wfile.write(body)

    def garbage(self, h: BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"\x00\xffHTTP/9 what\r\n\r\n" + os.urandom(64))
        h.close_connection = True

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        self.requests += 1
        url = urlparse(h.path)
        parts = url.path.strip("/").split("/")
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if self.mode == "hang":
            self.release.wait(300)
            h.close_connection = True
            return
        if self.mode == "garbage":
            self.garbage(h)
            return
        if h.command != "GET":
            self.send(h, 500, b'{"type":"error","error":{"type":"api_error","message":"no"}}')
            return
        if parts == ["v1", "memory_stores", self.store_id]:
            body: dict[str, Any] = {
                "type": "memory_store",
                "id": self.store_id,
                "name": "Hostile",
                "description": "",
                "metadata": {},
                "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:00:00Z",
                "archived_at": None,
            }
            self.send(h, 200, json.dumps(body).encode())
        elif parts == ["v1", "memory_stores", self.store_id, "memories"]:
            full = query.get("view") == "full"
            limit = int(query.get("limit", "20"))
            start = int(query.get("page", "page_0")[5:])
            ids = sorted(
                self.memories,
                key=lambda i: self.memories[i]["path"].encode("utf-8", "surrogatepass"),
            )
            if start == 0 and not full:
                self.listings += 1
            items = [self.view(i, full) for i in ids] + self.extra
            limit = self.page_size or limit
            total = len(items) + self.generated
            chunk = items[start : start + limit] + [
                generated_view(self.store_id, k - len(items), full)
                for k in range(max(start, len(items)), min(total, start + limit))
            ]
            more = start + limit < total
            body = {
                "data": chunk,
                "next_page": f"page_{start + limit}" if more else None,
            }
            self.send(h, 200, json.dumps(body).encode())
        elif len(parts) == 5 and parts[:4] == ["v1", "memory_stores", self.store_id, "memories"]:
            if parts[4] in self.huge:
                self.stream_huge(h, parts[4])
            elif parts[4].startswith("gen_"):
                body = generated_view(self.store_id, int(parts[4][4:]), True)
                self.send(h, 200, json.dumps(body).encode())
            else:
                self.retrieve(h, parts[4])
        elif parts == ["v1", "memory_stores", self.store_id, "memfs", "watch"] and self.watch_bytes:
            self.stream_watch(h)
        else:
            self.send(h, 404, NOT_FOUND)

    def stream_watch(self, h: BaseHTTPRequestHandler) -> None:
        """A watch answer of `watch_bytes` bytes, 1 MiB at a time, its end the close."""
        self.watches += 1
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.send_header("connection", "close")
        h.end_headers()
        h.close_connection = True
        block = b"a" * (1 << 20)
        try:
            h.wfile.write(b'{"head": "')
            for offset in range(0, self.watch_bytes, len(block)):
                h.wfile.write(block[: self.watch_bytes - offset])
            h.wfile.write(b'"}')
        except OSError:  # the client stopped reading, as it should
            pass

    def stream_huge(self, h: BaseHTTPRequestHandler, mid: str) -> None:
        """The memory with `huge[mid]` bytes of content, sent 1 MiB at a time."""
        self.retrieved.append(mid)
        size = self.huge[mid]
        head, tail = json.dumps({**self.view(mid, True), "content": ""}).split('"content": ""')
        prefix, suffix = (head + '"content": "').encode(), ('"' + tail).encode()
        h.send_response(200)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(prefix) + size + len(suffix)))
        h.end_headers()
        block = b"a" * (1 << 20)
        try:
            h.wfile.write(prefix)
            for offset in range(0, size, len(block)):
                h.wfile.write(block[: size - offset])
            h.wfile.write(suffix)
        except OSError:  # the client stopped reading, as it should
            h.close_connection = True

    def retrieve(self, h: BaseHTTPRequestHandler, mid: str) -> None:
        raw = [m for m in self.extra if isinstance(m, dict) and m.get("id") == mid]
        if mid not in self.memories and not raw:
            self.send(h, 404, NOT_FOUND)
        elif mid not in self.memories:
            self.retrieved.append(mid)
            self.send(h, 200, json.dumps(raw[0]).encode())
        else:
            self.retrieved.append(mid)
            how = self.behaviour.get(mid)
            if how == "hang":
                self.release.wait(300)
                h.close_connection = True
            elif how == "garbage":
                self.garbage(h)
            elif how == "html":
                self.send(h, 200, b"<html>surprise</html>")
            else:
                self.send(h, 200, json.dumps(self.view(mid, True)).encode())


def generated_content(i: int) -> str:
    return f"generated note {i}\n"


def generated_view(store_id: str, i: int, full: bool) -> dict[str, Any]:
    """Memory number `i` of the generated ones: 1,000 to a directory."""
    text = generated_content(i)
    obj: dict[str, Any] = {
        "type": "memory",
        "id": f"gen_{i:08d}",
        "memory_store_id": store_id,
        "path": f"/gen/d{i // 1000:03d}/n{i:06d}.md",
        "content_sha256": sha(text),
        "content_size_bytes": len(text),
        "memory_version_id": f"memver_gen_{i:08d}",
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    if full:
        obj["content"] = text
    return obj
