"""A server that accepts connections and never answers: `memfs store` reports it within
seconds, in one line that names the store URL (issue 12, item 7)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.hung import HungServer

pytestmark = pytest.mark.deadline(120)


@pytest.mark.parametrize("args", [["store", "list"], ["store", "show", "memstore_x"]])
def test_store_commands_report_a_hung_server(args: list[str]) -> None:
    with HungServer() as hung:
        env = {**os.environ, "ANTHROPIC_BASE_URL": hung.url}
        # The bound is the point of the test: today it is silent for 60 s and more.
        result = subprocess.run(
            [sys.executable, "-m", "memfs.cli", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert hung.accepted >= 1
    assert result.returncode == 3, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert hung.url in lines[0]
    assert "did not answer" in lines[0], lines[0]
    assert "ReadTimeout: ReadTimeout" not in lines[0]
