"""`memfs serve`: open the database, bind the socket, serve until SIGINT, SIGTERM or SIGHUP."""

from __future__ import annotations

import ipaddress
import logging
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from memfs import metrics
from memfs.config import STOP_SIGNALS, ExitCode, read_secret_file
from memfs.errors import ConfigError
from memfs.paths import MAX_MEMORIES_PER_STORE
from memfs.server.app import create_app
from memfs.server.backends import (
    UnknownBackend,
    describe_spec,
    open_storage,
)
from memfs.server.db import DatabaseUnavailable
from memfs.server.faults import FaultInjector, FaultSpec
from memfs.server.gate import HostCheck, RequestHook
from memfs.server.watch import DEFAULT_MAX_WATCHERS, WatchHub

log = logging.getLogger("memfs.server")


def _refuse(message: str) -> int:
    print(f"memfs serve: {message}", file=sys.stderr, flush=True)
    return ExitCode.USAGE


API_KEY_VARIABLE = "MEMFS_SERVE_API_KEY"
_EMPTY_KEY = " (an unset shell variable?): give the key, or leave it out to accept any request"


def admin_key(flag: str | None, path: str | None, environ: Mapping[str, str]) -> str | None:
    """The key every request must carry: `--api-key-file`, else `MEMFS_SERVE_API_KEY`,
    else `--api-key` with one warning (every local user reads it in `ps`); None: no key.

    A ConfigError for a key file that is missing, not private or empty, and for an empty
    `--api-key` or `MEMFS_SERVE_API_KEY` (an unset shell variable, `--api-key "$KEY"`):
    counted as a key it let an empty password in; counted as none it would open the
    server to anyone.
    """
    if path is not None:
        return read_secret_file(path, "key file")
    if flag is not None:
        if not flag.strip():
            raise ConfigError(f"--api-key is empty{_EMPTY_KEY}")
        log.warning(
            "the admin key is on the command line, where every local user can read it; "
            "give it as MEMFS_SERVE_API_KEY or --api-key-file"
        )
        return flag.strip()
    value = environ.get(API_KEY_VARIABLE)
    if value is not None and not value.strip():
        raise ConfigError(f"{API_KEY_VARIABLE} is set but empty{_EMPTY_KEY}")
    return None if value is None else value.strip()


def _is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`: only this host can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_checked(app: Any, api_key: str | None, allowed: Sequence[str]) -> Any:
    """Without a key, only requests to this host's names and `allowed` (DNS rebinding)."""
    return app if api_key is not None else HostCheck(app, allowed)


def _named(host: str) -> list[str]:
    """`--host` when it is a name (not an address): the name clients will ask for."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return [host] if host else []
    return []


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind and listen ourselves, so a taken port is a clear error before serving."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
    except BaseException:
        sock.close()
        raise
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


class CloseWhenStopping:
    """Once the server is stopping, every answer says `connection: close`.

    hypercorn (0.18) loses a keep-alive connection whose client sent its next request
    before the server, already stopping, finished the previous one: h11 holds that
    request (PAUSED), the stopping server closes the connection instead of starting
    the next cycle, and the read loop waits on `can_read` until `--shutdown-timeout`
    cancels it (seen: our=DONE their=DONE, terminated, 10.0 s). A mount's watch does
    exactly that (it asks again at once when answered), so SIGTERM took the whole
    timeout in about one stop of three. Told to close, a client sends nothing more on
    the connection.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.stopping = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def closing(message: Any) -> None:
            if self.stopping and message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (b"connection", b"close")]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, closing)


async def _serve(
    config: Config,
    app: CloseWhenStopping,
    url: str,
    watch: WatchHub,
    metrics_sock: socket.socket | None,
) -> None:
    if metrics_sock is not None:
        metrics.start(metrics_sock)
    with trio.open_signal_receiver(*STOP_SIGNALS) as signals:

        async def shutdown_trigger() -> None:
            async for signum in signals:
                log.info("stopping on signal=%s", signal.Signals(signum).name)
                app.stopping = True
                watch.close()  # a waiting watch must not hold the shutdown for its timeout
                return

        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve, app, config, shutdown_trigger=shutdown_trigger))
            print(f"memfs serve: listening on {url}", flush=True)


def _wrong_option(
    max_memories: int,
    port: int,
    pool_size: int,
    shutdown_timeout: float,
    metrics_addr: str | None,
    max_watchers: int,
) -> str | None:
    """Why the numbers given cannot serve, checked before the database is opened."""
    if not 1 <= max_memories <= MAX_MEMORIES_PER_STORE:
        return (
            f"--max-memories must be between 1 and {MAX_MEMORIES_PER_STORE}, the API's "
            "limit (a client refuses a listing of more)"
        )
    if max_watchers < 0:
        return "--max-watchers must not be negative"
    if not 0 <= port <= 65535:
        return f"--port {port} is not a TCP port"
    if not 1 <= pool_size <= 1000:
        return "--pool-size must be between 1 and 1000"
    if shutdown_timeout < 0:
        return "--shutdown-timeout must not be negative"
    if metrics_addr is not None:
        try:
            metrics.parse_addr(metrics_addr)
        except ValueError as exc:
            return str(exc)
    return None


def run_server(
    *,
    db: str | None,
    host: str = "127.0.0.1",
    port: int = 8765,
    api_key: str | None = None,
    max_memories: int = 10_000,
    hooks: Sequence[RequestHook] = (),
    faults: str | None = None,
    pool_size: int = 8,
    shutdown_timeout: float = 10.0,
    metrics_addr: str | None = None,
    console: bool = True,
    max_watchers: int = DEFAULT_MAX_WATCHERS,
    allowed_hosts: Sequence[str] = (),
) -> int:
    """Serve the Memory Stores API; 0 on a signal, 2 when it cannot start.

    On a signal it stops accepting, lets requests in flight finish (up to
    `shutdown_timeout` seconds), then closes the database.

    `hooks` is the fault-injection seam (see memfs.server.app); none by default.
    """
    fault_spec = None
    if faults:
        try:
            fault_spec = FaultSpec.parse(faults)
        except ValueError as exc:
            return _refuse(f"--faults: {exc}")
    wrong = _wrong_option(
        max_memories, port, pool_size, shutdown_timeout, metrics_addr, max_watchers
    )
    if wrong is not None:
        return _refuse(wrong)
    if api_key is not None and not api_key.strip():
        return _refuse(f"the admin key is empty{_EMPTY_KEY}")
    if console and api_key is None and not _is_loopback(host):
        return _refuse(
            f"the console on {host} would open every store to anyone who reaches it: "
            "give --api-key, or --no-console"
        )
    where = describe_spec(db)
    try:
        database = open_storage(db, max_memories=max_memories, pool_size=pool_size)
    except UnknownBackend as exc:
        return _refuse(str(exc))
    except DatabaseUnavailable as exc:
        return _refuse(f"cannot use the database {where}: {exc}")
    try:
        try:
            sock = bind_socket(host, port)
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno == 98:
                reason = "the port is already in use"
            return _refuse(f"cannot listen on {host}:{port}: {reason}")
        url = _url(sock)
        metrics_sock = None
        if metrics_addr is not None:
            try:
                metrics_sock = metrics.listen(metrics_addr)
            except OSError as exc:
                sock.close()
                return _refuse(str(exc))
        config = Config()
        config.bind = [f"fd://{sock.detach()}"]
        config.accesslog = None
        config.errorlog = logging.getLogger("hypercorn.error")
        config.graceful_timeout = shutdown_timeout
        config.keep_alive_timeout = 75.0
        watch = WatchHub(database, max_watchers=max_watchers)
        app = create_app(
            database,
            api_key=api_key,
            hooks=hooks,
            threads=pool_size,
            console=console,
            watch=watch,
        )
        app = _host_checked(app, api_key, [*allowed_hosts, *_named(host)])
        if fault_spec is not None:
            log.warning("fault injection is on faults=%s", faults)
            app = FaultInjector(app, fault_spec)
        if metrics_sock is not None:
            app = metrics.ServerMetrics(app)
        log.info(
            "serving backend=%s db=%s url=%s pool_size=%d", database.backend, where, url, pool_size
        )
        # Ignored outside the serving loop: trio's receiver re-raises a signal still
        # pending when it closes, and a second Ctrl-C must not turn into a traceback.
        previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}
        try:
            trio.run(_serve, config, CloseWhenStopping(app), url, watch, metrics_sock)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    finally:
        database.close()
    return ExitCode.OK
