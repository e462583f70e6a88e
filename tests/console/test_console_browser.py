"""The console in a real browser: log in, browse 1,000 memories, search, open, edit, hit
a concurrent-edit conflict, diff two versions, redact one and see it gone, and be held to
a read-only token. The pictures in docs/console.md come from this run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.console.conftest import (
    ADMIN_KEY,
    REBOUND_NAME,
    Site,
    api,
    issue_token,
    screenshots_dir,
)
from tests.support.server import ServerProcess

pytestmark = pytest.mark.deadline(300)


def _by_id(browser: Any, ident: str) -> Any:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, ident)


def _navigate(browser: Any, element: Any) -> None:
    """Click, then wait until the page the click leads to has replaced this one."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    def gone(_: Any) -> bool:
        """The old page's element is stale; mid-navigation Chromium may say so as
        "Node with given id does not belong to the document" instead."""
        try:
            element.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as e:
            if "does not belong to the document" in str(e):
                return True
            raise
        return False

    element.click()
    wait = WebDriverWait(browser, 20)
    wait.until(gone)
    wait.until(lambda b: b.execute_script("return document.readyState") == "complete")


def _submit(browser: Any, ident: str) -> None:
    _navigate(browser, _by_id(browser, ident))


def _follow(browser: Any, text: str) -> None:
    _navigate(browser, browser.find_element("link text", text))


def _login(browser: Any, site: Site, credential: str) -> None:
    browser.delete_all_cookies()
    browser.get(site.url + "/")
    assert "/console/login" in browser.current_url
    _by_id(browser, "credential").send_keys(credential)
    _submit(browser, "login")


def _shot(browser: Any, tmp_path: Path, name: str, width: int = 1280) -> None:
    """The whole page at `width` CSS pixels (a phone at 390), as the device would lay it
    out: Chromium's device metrics, not a resized window, which headless clamps."""
    folder = screenshots_dir(tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    metrics["height"] = min(max(int(height), 600), 3000)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        assert browser.save_screenshot(str(folder / f"{name}.png"))
        overflow = browser.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, f"{name} is wider than {width}px by {overflow}px"
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def _memory_id(site: Site, path: str) -> str:
    with api(site.server) as client:
        parent = path.rsplit("/", 1)[0] + "/"
        page = client.get(
            f"/v1/memory_stores/{site.store}/memories", params={"path_prefix": parent, "depth": 1}
        ).json()
    return str(next(m["id"] for m in page["data"] if m["path"] == path))


def test_login_browse_and_search(browser: Any, site: Site, tmp_path: Path) -> None:
    _login(browser, site, "not-the-key")
    assert "invalid API key" in _by_id(browser, "main").text
    _by_id(browser, "credential").send_keys(ADMIN_KEY)
    _submit(browser, "login")
    assert browser.current_url.endswith("/console/")
    page = _by_id(browser, "main").text
    assert "Team Notes" in page and "1000" in page
    assert "archived (read-only)" in page
    _shot(browser, tmp_path, "stores")

    _follow(browser, "Team Notes")
    tree = _by_id(browser, "tree").text.split("\n")
    assert tree[:3] == ["area0/", "area1/", "area2/"] and "preferences.md 24 B" in tree
    _follow(browser, "area3/")
    _follow(browser, "topic4/")
    names = _by_id(browser, "tree").text.split("\n")
    assert names and all(n.startswith("note") for n in names)
    assert len(names) == len([i for i in range(999) if i % 10 == 3 and i % 7 == 4])
    _shot(browser, tmp_path, "store")

    _by_id(browser, "q").send_keys("keyword-123")
    _submit(browser, "search")
    assert _by_id(browser, "result-count").text.startswith("1 match among")
    results = _by_id(browser, "results").text
    assert "/area3/topic4/note0123.md" in results and "keyword-123" in results
    _shot(browser, tmp_path, "search")
    _follow(browser, "/area3/topic4/note0123.md")
    assert _by_id(browser, "memory-path").text == "/area3/topic4/note0123.md"
    assert _by_id(browser, "content").text == "note 123\nkeyword-123"


def test_edit_conflict_diff_and_redact(browser: Any, site: Site, tmp_path: Path) -> None:
    _login(browser, site, ADMIN_KEY)
    memory_id = _memory_id(site, "/preferences.md")
    browser.get(f"{site.url}/s/{site.store}/m/{memory_id}")

    # edit: the new content reaches the store
    browser.find_element("css selector", "#edit-panel summary").click()
    box = _by_id(browser, "edit-content")
    box.send_keys("- likes tea\n")
    _submit(browser, "save")
    with api(site.server) as client:
        stored = client.get(f"/v1/memory_stores/{site.store}/memories/{memory_id}").json()
    assert stored["content"] == "- prefers short answers\n- likes tea\n"
    assert _by_id(browser, "content").text == "- prefers short answers\n- likes tea"
    _shot(browser, tmp_path, "memory")
    _shot(browser, tmp_path, "memory-phone", width=390)

    # a concurrent change: the page shows both versions and overwrites nothing
    browser.find_element("css selector", "#edit-panel summary").click()
    _by_id(browser, "edit-content").send_keys("- mine: green tea\n")
    with api(site.server) as client:
        client.post(
            f"/v1/memory_stores/{site.store}/memories/{memory_id}",
            json={"content": "- prefers short answers\n- likes tea\n- theirs: coffee\n"},
        ).raise_for_status()
    _submit(browser, "save")
    assert "changed while you edited it" in _by_id(browser, "main").text
    assert "- theirs: coffee" in _by_id(browser, "theirs").text
    assert "- mine: green tea" in _by_id(browser, "mine").text
    assert "+- mine: green tea" in _by_id(browser, "diff-view").text
    with api(site.server) as client:
        stored = client.get(f"/v1/memory_stores/{site.store}/memories/{memory_id}").json()
    assert stored["content"].endswith("- theirs: coffee\n")  # nothing overwritten
    _shot(browser, tmp_path, "conflict")

    # the diff between the first and the newest version
    browser.get(f"{site.url}/s/{site.store}/m/{memory_id}")
    radios = browser.find_elements("css selector", "input[name=a]")
    radios[-1].click()  # the oldest version
    _submit(browser, "diff")
    diff = _by_id(browser, "diff-view").text
    assert "+- likes tea" in diff and "+- theirs: coffee" in diff
    _shot(browser, tmp_path, "diff")

    # redact the version that said "likes tea" alone; it is gone from pages and the API
    with api(site.server) as client:
        versions = client.get(
            f"/v1/memory_stores/{site.store}/memory_versions", params={"memory_id": memory_id}
        ).json()["data"]
    middle = versions[1]["id"]  # newest first: [coffee, tea, original]
    browser.get(f"{site.url}/s/{site.store}/v/{middle}/redact")
    _submit(browser, "confirm-redact")
    with api(site.server) as client:
        gone = client.get(
            f"/v1/memory_stores/{site.store}/memory_versions/{middle}", params={"view": "full"}
        ).json()
    assert gone["content"] is None and gone["redacted_at"]
    browser.get(f"{site.url}/s/{site.store}/m/{memory_id}/diff?a={versions[2]['id']}&b={middle}")
    assert "likes tea" not in _by_id(browser, "diff-view").text
    assert "redacted" in _by_id(browser, "main").text

    # the head version cannot be redacted: the API's error, shown
    browser.get(f"{site.url}/s/{site.store}/v/{versions[0]['id']}/redact")
    _submit(browser, "confirm-redact")
    assert "is the current version" in _by_id(browser, "error").text


def test_save_without_an_edit_keeps_every_byte(browser: Any, site: Site) -> None:
    """Issue 35 item 7, in Chromium: open a memory with a leading newline, CRLF, a lone
    CR and LF, press Save without an edit: no new version, the bytes unchanged. Then an
    edit: the lines left alone keep their ends."""
    original = "\nfirst line\r\nsecond\rthird\n"
    with api(site.server) as client:
        made = client.post(
            f"/v1/memory_stores/{site.store}/memories",
            json={"path": "/line-ends.md", "content": original},
        ).json()
    _login(browser, site, ADMIN_KEY)
    browser.get(f"{site.url}/s/{site.store}/m/{made['id']}")
    browser.find_element("css selector", "#edit-panel summary").click()
    shown = browser.execute_script("return document.getElementById('edit-content').value")
    assert shown == "\nfirst line\nsecond\nthird\n"  # what a textarea holds: LF only
    _submit(browser, "save")
    with api(site.server) as client:
        stored = client.get(f"/v1/memory_stores/{site.store}/memories/{made['id']}").json()
        versions = client.get(
            f"/v1/memory_stores/{site.store}/memory_versions", params={"memory_id": made["id"]}
        ).json()["data"]
    assert stored["content"] == original
    assert stored["content_sha256"] == made["content_sha256"]
    assert [v["id"] for v in versions] == [made["memory_version_id"]]

    browser.find_element("css selector", "#edit-panel summary").click()
    _by_id(browser, "edit-content").send_keys("fourth")
    _submit(browser, "save")
    with api(site.server) as client:
        stored = client.get(f"/v1/memory_stores/{site.store}/memories/{made['id']}").json()
    assert stored["content"] == original + "fourth"


def test_a_read_only_token_reads_only_its_store(browser: Any, site: Site) -> None:
    token = issue_token(site.server, f"{site.store}:ro")
    _login(browser, site, token)
    page = _by_id(browser, "main").text
    assert "Team Notes" in page and "Private" not in page
    memory_id = _memory_id(site, "/area0/topic0/note0000.md")
    browser.get(f"{site.url}/s/{site.store}/m/{memory_id}")
    assert _by_id(browser, "content").text == "note 0\nkeyword-0"
    assert not browser.find_elements("id", "edit-panel")
    assert not browser.find_elements("css selector", ".redact-link")
    # a hand-made edit form with a valid CSRF token is still refused
    browser.get(f"{site.url}/s/{site.store}/new")
    assert "may only read" in _by_id(browser, "error").text
    browser.get(f"{site.url}/s/{site.other}")
    assert "not found" in _by_id(browser, "error").text


def test_a_page_under_a_rebound_name_reads_nothing(browser: Any, tmp_path: Path) -> None:
    """Issue 35 item 6: a keyless `memfs serve` (the README's) answered any Host, so a
    page under a name resolving to 127.0.0.1 was same-origin with it and read every
    store. Chromium, told that rebound.test is 127.0.0.1, gets the refusal instead."""
    server = ServerProcess(tmp_path / "open.db").start()
    try:
        with api(server) as client:
            client.post("/v1/memory_stores", json={"name": "Secret Plans"}).raise_for_status()
        browser.get(f"http://{REBOUND_NAME}:{server.port}/console/")
        shown = browser.find_element("tag name", "body").text
        assert "Secret Plans" not in shown and "--allowed-host rebound.test" in shown, shown
        browser.get(f"http://{REBOUND_NAME}:{server.port}/v1/memory_stores")
        assert "Secret Plans" not in browser.find_element("tag name", "body").text
        browser.get(f"http://127.0.0.1:{server.port}/console/")
        assert "Secret Plans" in _by_id(browser, "main").text  # the server's own name works
    finally:
        assert server.stop() == 0


def test_with_a_key_the_cookie_is_not_sent_from_another_site(browser: Any, site: Site) -> None:
    """Issue 35 item 6, with a key: every Host is answered, so it is the cookie that must
    not work cross-site. Logged in at 127.0.0.1, a page of another site (rebound.test,
    also 127.0.0.1 to this browser) that navigates to the console or posts one of its
    forms gets the login page: SameSite=Strict keeps the cookie home."""
    from selenium.webdriver.support.wait import WebDriverWait

    _login(browser, site, ADMIN_KEY)
    browser.get(f"{site.url}/")
    assert "Team Notes" in _by_id(browser, "main").text  # logged in at 127.0.0.1
    port = site.server.port
    for action in (
        f"location.href = 'http://127.0.0.1:{port}/console/'",
        "const f = document.createElement('form'); f.method = 'post';"
        f" f.action = 'http://127.0.0.1:{port}/console/s/{site.store}/new';"
        " for (const [k, v] of [['path', '/cross-site.md'], ['content', 'x']]) {"
        " const i = document.createElement('input'); i.name = k; i.value = v;"
        " f.appendChild(i); } document.body.appendChild(f); f.submit();",
    ):
        browser.get(f"http://{REBOUND_NAME}:{port}/v1/memory_stores")  # a page of no CSP
        browser.execute_script(action)
        WebDriverWait(browser, 20).until(lambda b: "127.0.0.1" in b.current_url)
        WebDriverWait(browser, 20).until(
            lambda b: b.execute_script("return document.readyState") == "complete"
        )
        assert "/console/login" in browser.current_url, browser.current_url
    with api(site.server) as client:
        listed = client.get(f"/v1/memory_stores/{site.store}/memories", params={"depth": 1})
    assert "/cross-site.md" not in listed.text
    browser.get(f"{site.url}/")
    assert "Team Notes" in _by_id(browser, "main").text  # still logged in at home
