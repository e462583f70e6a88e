"""A local stand-in of the control plane the SDK's `EnvironmentWorker` talks to.

Exactly the endpoints `EnvironmentWorker.handle_item()` calls, on 127.0.0.1: the work
item's heartbeat and stop, the session's retrieve, its event history, its event stream
(server-sent events) and the tool results it posts. The session is a script: each
scripted tool call is emitted once the previous one has its result, and after the last
one the session ends the way the test chose. Every `/v1/memory_stores…` request is
passed through to a real `memfs serve`, so the worker's memory engine (the SDK's own or
memfs) talks to a real Memory Stores API behind the same base URL.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

ENV_ID = "env_standin"
WORK_ID = "work_standin"
SESSION_ID = "sesn_standin"
TOKEN = "sk-ant-sessions-standin"
ENV_KEY = "sk-ant-envkey-standin"


def work_secret(token: str | None = TOKEN) -> str:
    """A work item's `secret`: base64url JSON, carrying `sessions_token` when given."""
    payload: dict[str, str] = {"api_base_url": "http://127.0.0.1"}
    if token is not None:
        payload["sessions_token"] = token
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class Call:
    name: str
    input: dict[str, Any]


@dataclass
class Posted:
    tool_use_id: str
    name: str
    is_error: bool
    text: str


@dataclass
class Script:
    """What the session does: tool calls in order, then how it ends.

    `end`: "terminate" (a clean end), "error" (the event stream is then refused with
    403, a permanent error: the worker's run fails) or "hang" (nothing more happens; the
    test cancels the worker).
    """

    calls: list[Call]
    end: str = "terminate"
    resources: list[dict[str, Any]] = field(default_factory=list)
    after_result: Callable[[int, Posted], None] | None = None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-stream (the worker closing it) is not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ControlPlane:
    """One session, one work item; run it in a thread with `with ControlPlane(...) as cp`."""

    def __init__(self, script: Script, memory_url: str, *, token: str = TOKEN) -> None:
        self.script = script
        self.memory_url = memory_url.rstrip("/")
        self.token = token
        self.events: list[dict[str, Any]] = []
        self.results: list[Posted] = []
        self.heartbeats = 0
        self.stopped = threading.Event()
        self.ended = threading.Event()  # the last scripted call has its result
        self.requests: list[str] = []
        self.polled = False
        self.unknown: list[str] = []
        self._cond = threading.Condition()
        self._next = 0
        self._append({"type": "session.status_running"})
        self._emit_next()
        self.httpd = _Server(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._proxy = httpx.Client(timeout=60)
        # Open gates: a test closes one to hold that kind of memory request at the proxy
        # (bounded at 60 s) until it opens the gate again; a watch's answer too.
        self.watch_gate = threading.Event()  # memfs serve's watch
        self.write_gate = threading.Event()  # creates and updates of memories
        self.watch_gate.set()
        self.write_gate.set()

    def __enter__(self) -> ControlPlane:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self.ended.set()
            self._cond.notify_all()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._proxy.close()

    # -- the session's story ------------------------------------------------------------
    def _append(self, event: dict[str, Any]) -> None:
        with self._cond:
            event = {"id": f"sevt_{len(self.events):04d}", "processed_at": _now(), **event}
            self.events.append(event)
            self._cond.notify_all()

    def _emit_next(self) -> None:
        if self._next < len(self.script.calls):
            call = self.script.calls[self._next]
            self._append(
                {
                    "type": "agent.tool_use",
                    "name": call.name,
                    "input": call.input,
                    "evaluated_permission": "allow",
                }
            )
            self._next += 1
            return
        self.ended.set()
        if self.script.end == "terminate":
            self._append({"type": "session.status_terminated"})

    def work_item(self) -> dict[str, Any]:
        return {
            "type": "work",
            "id": WORK_ID,
            "environment_id": ENV_ID,
            "state": "queued",
            "data": {"type": "session", "id": SESSION_ID},
            "metadata": {},
            "secret": work_secret(self.token),
            "created_at": _now(),
        }

    def session(self) -> dict[str, Any]:
        terminated = any(e["type"] == "session.status_terminated" for e in self.events)
        return {
            "type": "session",
            "id": SESSION_ID,
            "environment_id": ENV_ID,
            "status": "terminated" if terminated else "running",
            "created_at": _now(),
            "updated_at": _now(),
            "metadata": {},
            "title": None,
            "agent": {
                "type": "agent",
                "id": "agent_standin",
                "name": "stand-in",
                "version": 1,
                "skills": [],
                "tools": [],
                "mcp_servers": [],
                "model": {"id": "claude-standin"},
                "system": None,
                "description": None,
            },
            "resources": self.script.resources,
            "outcome_evaluations": [],
            "stats": {},
            "usage": {},
            "vault_ids": [],
        }

    def call_id(self, index: int) -> str | None:
        """The event id of the `index`-th scripted call, once it was emitted."""
        calls = [e["id"] for e in self.events if e["type"] == "agent.tool_use"]
        return calls[index] if index < len(calls) else None

    def interrupt(self, index: int) -> None:
        """The session stops waiting for a running call (a user interrupt resolves it):
        the worker stops the tool. Its own result, posted after, moves the script on."""
        call_id = self.call_id(index)
        assert call_id is not None, f"call {index} was not emitted yet"
        self._append(
            {
                "type": "user.tool_result",
                "tool_use_id": call_id,
                "is_error": True,
                "content": [{"type": "text", "text": "interrupted by the user"}],
            }
        )

    def _record_results(self, body: dict[str, Any]) -> None:
        for ev in body.get("events", []):
            if ev.get("type") != "user.tool_result":
                continue
            call = next(e for e in self.events if e["id"] == ev["tool_use_id"])
            content = ev.get("content") or []
            text = "".join(c.get("text", "") for c in content if isinstance(c, dict))
            posted = Posted(ev["tool_use_id"], call["name"], bool(ev.get("is_error")), text)
            self.results.append(posted)
            self._append(
                {
                    "type": "user.tool_result",
                    "tool_use_id": ev["tool_use_id"],
                    "content": content,
                    "is_error": posted.is_error,
                }
            )
            if self.script.after_result is not None:
                self.script.after_result(len(self.results) - 1, posted)
            self._emit_next()

    # -- HTTP -----------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        plane = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _body(self) -> bytes:
                n = int(self.headers.get("content-length") or 0)
                return self.rfile.read(n) if n else b""

            def _json(self, status: int, data: Any) -> None:
                raw = json.dumps(data).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.send_header("request-id", "req_standin")
                self.end_headers()
                self.wfile.write(raw)

            def _authorized(self) -> bool:
                if self.headers.get("authorization") in (
                    f"Bearer {plane.token}",
                    f"Bearer {ENV_KEY}",
                ):
                    return True
                self._json(
                    401,
                    {
                        "type": "error",
                        "error": {"type": "authentication_error", "message": "bad credential"},
                    },
                )
                return False

            def do_GET(self) -> None:
                self._route("GET")

            def do_POST(self) -> None:
                self._route("POST")

            def do_DELETE(self) -> None:
                self._route("DELETE")

            def _route(self, method: str) -> None:
                url = urllib.parse.urlsplit(self.path)
                path = url.path
                plane.requests.append(f"{method} {path}")
                if path.startswith("/v1/memory_stores"):
                    return self._proxy(method)
                if not self._authorized():
                    self._body()
                    return None
                body = self._body()
                work = f"/v1/environments/{ENV_ID}/work/{WORK_ID}"
                if method == "GET" and path == f"/v1/environments/{ENV_ID}/work/poll":
                    return self._poll()
                if method == "POST" and path == f"{work}/ack":
                    return self._json(200, plane.work_item())
                if method == "POST" and path == f"{work}/heartbeat":
                    plane.heartbeats += 1
                    return self._json(
                        200,
                        {
                            "type": "work_heartbeat",
                            "last_heartbeat": _now(),
                            "lease_extended": not plane.stopped.is_set(),
                            "state": "active",
                            "ttl_seconds": 60,
                        },
                    )
                if method == "POST" and path == f"{work}/stop":
                    plane.stopped.set()
                    return self._json(
                        200,
                        {
                            "type": "work",
                            "id": WORK_ID,
                            "environment_id": ENV_ID,
                            "state": "stopped",
                            "data": {"type": "session", "id": SESSION_ID},
                            "created_at": _now(),
                        },
                    )
                session = f"/v1/sessions/{SESSION_ID}"
                if method == "GET" and path == session:
                    return self._json(200, plane.session())
                if method == "GET" and path == f"{session}/events":
                    with plane._cond:
                        data = list(plane.events)
                    return self._json(200, {"data": data, "next_page": None})
                if method == "POST" and path == f"{session}/events":
                    plane._record_results(json.loads(body or b"{}"))
                    return self._json(200, {"data": []})
                if method == "GET" and path == f"{session}/events/stream":
                    return self._stream()
                plane.unknown.append(f"{method} {path}")
                return self._json(
                    404,
                    {
                        "type": "error",
                        "error": {
                            "type": "not_found_error",
                            "message": f"no route {method} {path}",
                        },
                    },
                )

            def _poll(self) -> None:
                """The work item once (for `EnvironmentWorker.run`), then an empty queue."""
                with plane._cond:
                    first, plane.polled = not plane.polled, True
                if first:
                    return self._json(200, plane.work_item())
                time.sleep(0.2)  # the API blocks an empty poll for a while
                return self._json(200, None)

            def _stream(self) -> None:
                if plane.script.end == "error" and plane.ended.is_set():
                    return self._json(
                        403,
                        {
                            "type": "error",
                            "error": {
                                "type": "permission_error",
                                "message": "the session was revoked",
                            },
                        },
                    )
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True
                sent = 0
                try:
                    while True:
                        with plane._cond:
                            while sent >= len(plane.events) and not plane.ended.is_set():
                                plane._cond.wait(0.5)
                            fresh = plane.events[sent:]
                            sent = len(plane.events)
                            done = plane.ended.is_set() and not fresh
                        for ev in fresh:
                            self.wfile.write(
                                f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n".encode()
                            )
                        self.wfile.flush()
                        if done:
                            if plane.script.end == "hang":
                                time.sleep(0.5)
                                continue
                            return
                except (BrokenPipeError, ConnectionResetError):
                    return

            def _proxy(self, method: str) -> None:
                body = self._body()
                path = urllib.parse.urlsplit(self.path).path
                if path.endswith("/memfs/watch"):
                    plane.watch_gate.wait(60)
                elif method == "POST" and "/memories" in path:
                    plane.write_gate.wait(60)
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in ("host", "content-length", "connection", "accept-encoding")
                }
                r = plane._proxy.request(
                    method, plane.memory_url + self.path, content=body, headers=headers
                )
                if path.endswith("/memfs/watch"):
                    plane.watch_gate.wait(60)  # a watch in flight when the gate closed
                raw = r.content
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "content-encoding",
                    ):
                        self.send_header(k, v)
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        return Handler


class SandboxHost:
    """A sandbox host's directories for a worker test: the mount root, a private runtime
    directory (control sockets) and a cache; `cleanup` leaves nothing mounted."""

    def __init__(self, tmp: Path, prefix: str) -> None:
        self.tmp = tmp
        self.root = tmp / "mnt-memory"
        self.root.mkdir()
        self.runtime = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))

    def env(self, url: str, **extra: str) -> dict[str, str]:
        """This host's environment for memfs, with no ANTHROPIC_* of the test runner's."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
        env.update(
            ANTHROPIC_BASE_URL=url,
            XDG_RUNTIME_DIR=str(self.runtime),
            XDG_CACHE_HOME=str(self.tmp / "cache"),
            **extra,
        )
        return env

    def cleanup(self) -> None:
        from tests.support.mount import is_mounted

        if is_mounted(self.root):
            subprocess.run(["fusermount3", "-u", "-z", str(self.root)], check=False)
        shutil.rmtree(self.runtime, ignore_errors=True)
