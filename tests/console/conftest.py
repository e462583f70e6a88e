"""A real `memfs serve` with an admin key and a store of 1,000 memories, and a real
headless Chromium (Debian's `chromium` + `chromium-driver`) driven by Selenium."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memfs.paths import ANTHROPIC_VERSION, BETA_MEMORY
from tests.support.server import ServerProcess, seed_bulk

ADMIN_KEY = "console-admin-key"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
MEMORIES = 1_000
REBOUND_NAME = "rebound.test"
"""A name the browser resolves to 127.0.0.1, as an attacker's DNS would after rebinding."""


def api(server: ServerProcess) -> httpx.Client:
    return httpx.Client(
        base_url=server.url,
        headers={
            "x-api-key": ADMIN_KEY,
            "anthropic-version": ANTHROPIC_VERSION,
            "anthropic-beta": BETA_MEMORY,
        },
        timeout=10,
    )


def issue_token(server: ServerProcess, scope: str) -> str:
    """`memfs serve token create --store SCOPE` against the server's database."""
    out = subprocess.run(
        [sys.executable, "-m", "memfs.cli", "serve", "--db", server.db, "token", "create",
         "--store", scope, "--ttl", "1h"],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


class Site:
    """The server under test and what the tests seeded in it."""

    def __init__(self, server: ServerProcess, store: str, other: str, archived: str) -> None:
        self.server = server
        self.url = server.url + "/console"
        self.store = store
        self.other = other
        self.archived = archived


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("console")
    server = ServerProcess(tmp / "db.sqlite", api_key=ADMIN_KEY).start()
    try:
        with api(server) as client:
            ids = []
            for name in ("Team Notes", "Private", "Old Project"):
                r = client.post("/v1/memory_stores", json={"name": name, "description": name})
                r.raise_for_status()
                ids.append(r.json()["id"])
            items = [
                (f"/area{i % 10}/topic{i % 7}/note{i:04}.md", f"note {i}\nkeyword-{i}\n")
                for i in range(MEMORIES - 1)
            ]
            items.append(("/preferences.md", "- prefers short answers\n"))
            seed_bulk(Path(server.db), ids[0], items)
            client.post(
                f"/v1/memory_stores/{ids[2]}/memories", json={"path": "/x.md", "content": "x\n"}
            ).raise_for_status()
            client.post(f"/v1/memory_stores/{ids[2]}/archive").raise_for_status()
        yield Site(server, ids[0], ids[1], ids[2])
    finally:
        server.retire()


def _browser_missing() -> str | None:
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            return f"{path} is missing (scripts/install installs chromium and chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the test extra)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    missing = _browser_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests need a browser under CI=true: {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
        "--disable-quic", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--window-size=1280,900",
        f"--host-resolver-rules=MAP {REBOUND_NAME} 127.0.0.1",  # a DNS rebinding, for its test
        f"--user-data-dir={tmp_path_factory.mktemp('chromium')}",
    ):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshots_dir(tmp: Path) -> Path:
    """`MEMFS_CONSOLE_SCREENSHOTS=DIR` keeps the pictures (docs/console.md's come from
    `MEMFS_CONSOLE_SCREENSHOTS=docs/console pytest tests/console`)."""
    chosen = os.environ.get("MEMFS_CONSOLE_SCREENSHOTS")
    return Path(chosen) if chosen else tmp
