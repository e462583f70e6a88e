"""Prometheus metrics (`--metrics-addr HOST:PORT` on `mount`, `session` and `serve`).

Off by default: until `enable()` every hook below is one `None` check, and
`prometheus_client` is not even imported, so a CLI command or a mount without the
option pays nothing. The endpoint is served from the process's own trio loop (not a
thread), so the gauges read the daemon's tree between two handlers, never mid-change.
The list of metrics is in docs/operations.md ("Metrics").
"""

from __future__ import annotations

import errno
import logging
import socket
import time
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import trio

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

log = logging.getLogger("memfs.metrics")


class StoreGauges(Protocol):
    """What the store gauges read: `StoreSync.statistics()` (memfs/sync/engine.py) has these.

    A protocol, so this bottom layer needs no import of the sync engine.
    """

    @property
    def dirty(self) -> int: ...
    @property
    def refused(self) -> int: ...
    @property
    def conflicts(self) -> int: ...
    @property
    def pending_deletes(self) -> int: ...
    @property
    def memories(self) -> int: ...
    @property
    def missing_content(self) -> int: ...
    @property
    def offline(self) -> bool: ...


# (store id, that store's `StoreSync.statistics()`) for every store of the mount.
StoreStats = Callable[[], Iterable[tuple[str, StoreGauges]]]

# Upload latencies run from a few ms (loopback) to the client's retry deadline.
PUSH_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
MAX_REQUEST_HEAD = 8192
REQUEST_READ_TIMEOUT = 10.0


def parse_addr(text: str) -> tuple[str, int]:
    """'127.0.0.1:9100' or '[::1]:9100' -> (host, port); ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--metrics-addr {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9100")
    return host, int(port)


def listen(text: str) -> socket.socket:
    """Bind the endpoint before anything starts, so a taken port fails the start."""
    host, port = parse_addr(text)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise OSError(f"cannot listen on --metrics-addr {text}: {e.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(64)
    except OSError as e:
        sock.close()
        reason = "the port is already in use" if e.errno == errno.EADDRINUSE else e.strerror
        raise OSError(f"cannot listen on --metrics-addr {text}: {reason}") from None
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"


class _Metrics:
    """Every metric of this process, created on `enable()`."""

    def __init__(self) -> None:
        from prometheus_client import (
            CollectorRegistry,
            Counter,
            GCCollector,
            Histogram,
            PlatformCollector,
            ProcessCollector,
        )

        self.registry = registry = CollectorRegistry()
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
        self.passes = Counter(
            "memfs_sync_passes",
            "Sync passes by store and outcome "
            "(ok, idle: a probe that found nothing new, failed, cut-off).",
            ["store", "outcome"],
            registry=registry,
        )
        self.conflicts = Counter(
            "memfs_conflicts",
            "Store-wins conflicts (a conflict copy kept the local bytes).",
            ["store"],
            registry=registry,
        )
        self.feed_missed = Counter(
            "memfs_feed_missed",
            "Changes a full listing found that the change feed had not brought.",
            ["store"],
            registry=registry,
        )
        self.requests = Counter(
            "memfs_store_requests",
            "HTTP requests to the store, each "
            "attempt, by kind (API call) and status (HTTP code, "
            "'error' or 'timeout').",
            ["kind", "status"],
            registry=registry,
        )
        self.bytes = Counter(
            "memfs_store_bytes",
            "HTTP body bytes to (up) and from (down) the store.",
            ["direction"],
            registry=registry,
        )
        self.push_seconds = Histogram(
            "memfs_push_seconds",
            "Time for one upload (create, update, delete) to be confirmed, retries included.",
            ["kind"],
            buckets=PUSH_BUCKETS,
            registry=registry,
        )
        self.fuse_ops = Counter(
            "memfs_fuse_operations",
            "FUSE requests by operation and result (ok or the errno name).",
            ["op", "result"],
            registry=registry,
        )
        self.server_requests = Counter(
            "memfs_server_requests",
            "`memfs serve`: requests by method, route and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.server_seconds = Histogram(
            "memfs_server_request_seconds",
            "`memfs serve`: time to answer a request.",
            ["method", "route"],
            buckets=PUSH_BUCKETS,
            registry=registry,
        )
        self.store_stats: StoreStats | None = None
        self._fuse: dict[tuple[str, int], Any] = {}  # labelled children: the hot path
        registry.register(_StoreCollector(self))

    def fuse(self, op: str, err: int) -> None:
        child = self._fuse.get((op, err))
        if child is None:
            result = "ok" if err == 0 else errno.errorcode.get(err, str(err))
            child = self._fuse[(op, err)] = self.fuse_ops.labels(op, result)
        child.inc()


class _StoreCollector:
    """Gauges read at scrape time from the live tree (in the trio thread)."""

    GAUGES: tuple[tuple[str, Callable[[StoreGauges], float], str], ...] = (
        ("memfs_dirty_files", lambda s: s.dirty, "Changed files not pushed yet."),
        (
            "memfs_refused_files",
            lambda s: s.refused,
            "Files the store refused; held back until they change.",
        ),
        (
            "memfs_conflicted_files",
            lambda s: s.conflicts,
            "Files whose last sync kept a conflict copy.",
        ),
        ("memfs_pending_deletes", lambda s: s.pending_deletes, "Local deletions not sent yet."),
        ("memfs_memories", lambda s: s.memories, "Files of the store in the mount."),
        (
            "memfs_missing_content",
            lambda s: s.missing_content,
            "Files whose content is still downloading.",
        ),
        ("memfs_store_offline", lambda s: s.offline, "1 while the store does not answer."),
    )

    def __init__(self, metrics: _Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []  # no fixed set: the stores are known only once a mount starts

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        source = self.metrics.store_stats
        if source is None:
            return
        families = [
            (read, GaugeMetricFamily(name, text, labels=["store"]))
            for name, read, text in self.GAUGES
        ]
        for store_id, stats in source():
            for read, family in families:
                family.add_metric([store_id], float(read(stats)))
        yield from (family for _, family in families)


_m: _Metrics | None = None


def enable() -> CollectorRegistry:
    global _m
    if _m is None:
        _m = _Metrics()
    return _m.registry


def watch_stores(source: StoreStats) -> None:
    if _m is not None:
        _m.store_stats = source


# -- hooks (no-ops while disabled) -------------------------------------------------------


def fuse_op(op: str, err: int) -> None:
    if _m is not None:
        _m.fuse(op, err)


def sync_pass(store_id: str, outcome: str, conflicts: int) -> None:
    if _m is not None:
        _m.passes.labels(store_id, outcome).inc()
        if conflicts:
            _m.conflicts.labels(store_id).inc(conflicts)


def feed_missed(store_id: str, missed: int) -> None:
    if _m is not None:
        _m.feed_missed.labels(store_id).inc(missed)


def store_request(kind: str, status: str, sent: int, received: int) -> None:
    if _m is not None:
        _m.requests.labels(kind, status).inc()
        if sent:
            _m.bytes.labels("up").inc(sent)
        if received:
            _m.bytes.labels("down").inc(received)


@contextmanager
def push_timer(kind: str) -> Iterator[None]:
    if _m is None:
        yield
        return
    t0 = time.monotonic()
    try:
        yield
    finally:
        _m.push_seconds.labels(kind).observe(time.monotonic() - t0)


# -- `memfs serve`: an ASGI wrapper -----------------------------------------------------


def _route(path: str) -> str:
    """/v1/memory_stores/memstore_1/memories/mem_2 -> /v1/memory_stores/{id}/memories/{id}:
    ids never become label values (one series per object would grow without bound)."""
    parts = path.split("/")
    return (
        "/".join(p if i < 2 or i % 2 == 0 or not p else "{id}" for i, p in enumerate(parts))
        if path.startswith("/v1/")
        else "other"
    )


class ServerMetrics:
    """Counts and times every HTTP request of `memfs serve`."""

    def __init__(self, app: Any) -> None:
        enable()
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        m = _m
        if scope["type"] != "http" or m is None:
            await self.app(scope, receive, send)
            return
        status = ["error"]

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = str(message["status"])
            await send(message)

        method, route = scope["method"], _route(scope.get("path", ""))
        t0 = time.monotonic()
        try:
            await self.app(scope, receive, sending)
        finally:
            m.server_requests.labels(method, route, status[0]).inc()
            m.server_seconds.labels(method, route).observe(time.monotonic() - t0)


# -- the endpoint -----------------------------------------------------------------------


def start(sock: socket.socket) -> None:
    """Serve `sock` for the rest of this trio run (a system task: the run ends it)."""
    registry = enable()
    trio.lowlevel.spawn_system_task(
        _serve, trio.socket.from_stdlib_socket(sock), registry, name="memfs.metrics"
    )
    log.info("serving metrics url=%s", url_of(sock))


async def _serve(sock: trio.socket.SocketType, registry: CollectorRegistry) -> None:
    async def answer(stream: trio.SocketStream) -> None:
        try:
            await _answer(stream, registry)
        except Exception as e:  # a scraper's trouble never reaches the mount
            log.debug("metrics request failed error=%r", e)

    await trio.serve_listeners(answer, [trio.SocketListener(sock)])


async def _answer(stream: trio.SocketStream, registry: CollectorRegistry) -> None:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    async with stream:
        head = b""
        with trio.move_on_after(REQUEST_READ_TIMEOUT):
            while b"\r\n\r\n" not in head and len(head) < MAX_REQUEST_HEAD:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                head += chunk
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) < 2:
            return
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            status, ctype, body = b"405 Method Not Allowed", b"text/plain", b"GET only\n"
        elif target not in (b"/metrics", b"/"):
            status, ctype, body = b"404 Not Found", b"text/plain", b"see /metrics\n"
        else:
            status, ctype, body = b"200 OK", CONTENT_TYPE_LATEST.encode(), generate_latest(registry)
        await stream.send_all(
            b"HTTP/1.1 "
            + status
            + b"\r\nContent-Type: "
            + ctype
            + b"\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + (body if method != b"HEAD" else b"")
        )


# -- a session's endpoint: its store daemons' metrics, merged ---------------------------


def merge(texts: list[str]) -> bytes:
    """Several processes' expositions as one: the same series are summed (a session's
    FUSE operations, requests, memory), a start time is the earliest; per-store series
    carry their `store` label and stay apart."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.metrics_core import Metric
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample

    families: dict[str, Metric] = {}
    series: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            families.setdefault(family.name, family)
            kept = series.setdefault(family.name, {})
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                old = kept.get(key)
                if old is not None:
                    earliest = sample.name.endswith("_start_time_seconds")
                    value = min(old.value, sample.value) if earliest else old.value + sample.value
                    sample = sample._replace(value=value)
                kept[key] = sample

    class Merged:
        def collect(self) -> Iterator[Metric]:
            for name, family in families.items():
                family.samples = list(series[name].values())
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Merged())
    return bytes(generate_latest(registry))


def serve_merged(sock: socket.socket, sources: Callable[[], list[str]]) -> None:
    """Serve `sock` from a thread: each scrape fetches every URL `sources` names (a
    session's store daemons, each on its own loopback port) and answers them merged."""
    import http.server
    import threading
    import urllib.request

    from prometheus_client import CONTENT_TYPE_LATEST

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                self.send_error(404, "see /metrics")
                return
            texts = []
            for url in sources():
                try:
                    with urllib.request.urlopen(url, timeout=REQUEST_READ_TIMEOUT) as answer:
                        texts.append(answer.read().decode())
                except OSError as e:  # a store daemon going away: the others still count
                    log.debug("metrics of a store not read url=%s error=%r", url, e)
            body = merge(texts)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass  # scrapes are not news

    server = http.server.ThreadingHTTPServer(
        sock.getsockname()[:2], Handler, bind_and_activate=False
    )
    server.socket.close()
    server.socket = sock
    threading.Thread(target=server.serve_forever, name="memfs.metrics", daemon=True).start()
    log.info("serving metrics url=%s", url_of(sock))
