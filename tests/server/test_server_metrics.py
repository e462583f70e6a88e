"""`memfs serve --metrics-addr`: requests by route and status, scraped over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.api import Api, ApiCallFailed
from tests.support.metrics import free_port, scrape, value
from tests.support.server import REPO_ROOT, start_server


def test_serve_counts_requests_by_route_and_status(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    server = start_server(tmp_path / "store.db", extra_args=["--metrics-addr", f"127.0.0.1:{port}"])
    try:
        with Api(server.url) as api:
            sid = api.create_store("metrics")["id"]
            for i in range(3):
                api.create_memory(sid, f"/m{i}.md", "x\n")
            with pytest.raises(ApiCallFailed):
                api.create_memory(sid, "/m0.md", "taken\n")
            api.list_memories(sid)
        samples = scrape(url)
        memories = "/v1/memory_stores/{id}/memories"
        assert (
            value(
                samples,
                "memfs_server_requests_total",
                method="POST",
                route="/v1/memory_stores",
                status="200",
            )
            == 1
        )
        assert (
            value(
                samples, "memfs_server_requests_total", method="POST", route=memories, status="200"
            )
            == 3
        )
        assert (
            value(
                samples, "memfs_server_requests_total", method="POST", route=memories, status="409"
            )
            == 1
        )
        assert (
            value(samples, "memfs_server_request_seconds_count", method="GET", route=memories) >= 1
        )
        # Ids never become label values: one series per route, not per store.
        assert not any(sid in str(labels) for _, labels in samples)
        assert (
            value(scrape(url), "memfs_server_requests_total", method="GET", route=memories) == 1
        )  # a scrape is not an API request
    finally:
        assert server.stop() == 0


def test_serve_refuses_a_bad_or_taken_metrics_address(tmp_path: Path) -> None:
    def serve(addr: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "memfs.cli",
                "serve",
                "--port",
                "0",
                "--db",
                str(tmp_path / "s.db"),
                "--metrics-addr",
                addr,
            ],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO_ROOT,
        )

    bad = serve("localhost")
    assert bad.returncode == 2, bad.stderr
    assert "expected HOST:PORT" in bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = serve(f"127.0.0.1:{port}")
    assert busy.returncode == 2
    assert "the port is already in use" in busy.stderr
