"""The console's HTTP contract without a browser: sessions, CSRF, escaping, redirects,
archived stores, --no-console, and the refusal to open it on a non-loopback address."""

from __future__ import annotations

import random
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from memfs.server.console.auth import MAX_SESSIONS
from memfs.server.console.diff import keep_line_ends
from tests.console.conftest import ADMIN_KEY, Site, api, issue_token
from tests.support.deadline import eventually
from tests.support.server import ServerProcess

pytestmark = pytest.mark.deadline(120)


def _login(site: Site, credential: str) -> httpx.Client:
    client = httpx.Client(base_url=site.url, timeout=10)
    form = client.get("/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    done = client.post("/login", data={"nonce": nonce.group(1), "credential": credential})
    assert done.status_code == 303, done.text
    return client


def _csrf(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found is not None, page.text
    return found.group(1)


@pytest.fixture
def admin(site: Site) -> Iterator[httpx.Client]:
    client = _login(site, ADMIN_KEY)
    try:
        yield client
    finally:
        client.close()


def test_the_session_cookie_is_httponly_strict_and_scoped(site: Site) -> None:
    client = httpx.Client(base_url=site.url, timeout=10)
    assert client.get("/").headers["location"] == "/console/login?next=%2Fconsole%2F"
    form = client.get("/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    done = client.post("/login", data={"nonce": nonce.group(1), "credential": ADMIN_KEY})
    cookie = next(h for h in done.headers.get_list("set-cookie") if h.startswith("memfs_console="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    page = client.get("/")
    assert page.status_code == 200 and "Team Notes" in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    client.close()


def test_a_form_without_its_csrf_token_is_refused(site: Site, admin: httpx.Client) -> None:
    url = f"/s/{site.store}/new"
    for data in ({"path": "/csrf.md", "content": "x"}, {"path": "/csrf.md", "csrf": "forged"}):
        refused = admin.post(url, data=data)
        assert refused.status_code == 403 and "stale" in refused.text
    with api(site.server) as client:
        listed = client.get(f"/v1/memory_stores/{site.store}/memories", params={"depth": 1})
    assert "/csrf.md" not in listed.text
    csrf = _csrf(admin.get(url))
    made = admin.post(url, data={"path": "/csrf.md", "content": "ok\r\n", "csrf": csrf})
    assert made.status_code == 303
    memory_id = made.headers["location"].rsplit("/", 1)[1]
    with api(site.server) as client:
        stored = client.get(f"/v1/memory_stores/{site.store}/memories/{memory_id}").json()
    assert stored["content"] == "ok\n"  # a textarea's CRLF is not what the agent wrote


def test_contents_and_paths_are_escaped(site: Site, admin: httpx.Client) -> None:
    with api(site.server) as client:
        made = client.post(
            f"/v1/memory_stores/{site.store}/memories",
            json={"path": "/<b>x</b>.md", "content": "<script>alert(1)</script>"},
        ).json()
    page = admin.get(f"/s/{site.store}/m/{made['id']}")
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "&lt;b&gt;x&lt;/b&gt;.md" in page.text


def test_login_never_redirects_off_the_console(site: Site) -> None:
    client = httpx.Client(base_url=site.url, timeout=10)
    form = client.get("/login", params={"next": "https://example.invalid/"})
    assert 'value="/console/"' in form.text
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    assert nonce is not None
    done = client.post(
        "/login",
        data={"nonce": nonce.group(1), "credential": ADMIN_KEY, "next": "//example.invalid/"},
    )
    assert done.headers["location"] == "/console/"
    client.close()


def test_an_archived_store_is_read_only(site: Site, admin: httpx.Client) -> None:
    page = admin.get(f"/s/{site.archived}")
    assert "archived: it is read-only" in page.text and "New memory" not in page.text
    csrf = _csrf(admin.get("/"))
    refused = admin.post(
        f"/s/{site.archived}/new", data={"path": "/y.md", "content": "y", "csrf": csrf}
    )
    assert refused.status_code == 409 and "archived" in refused.text
    # Issue 35 item 11: the API deletes and redacts in an archived store; the console,
    # which says an archived store is read-only, did so too. It refuses both now.
    with api(site.server) as client:
        listed = client.get(f"/v1/memory_stores/{site.archived}/memories").json()["data"]
        memory = next(m for m in listed if m["path"] == "/x.md")
        version = memory["memory_version_id"]
    archived = f"memory store {site.archived} is archived: the console keeps it read-only"
    for url in (
        f"/s/{site.archived}/m/{memory['id']}/delete",
        f"/s/{site.archived}/v/{version}/redact",
    ):
        shown = admin.get(url)
        assert shown.status_code == 409 and archived in shown.text, shown.text
        done = admin.post(url, data={"sha": memory["content_sha256"], "csrf": csrf})
        assert done.status_code == 409 and archived in done.text, done.text
    with api(site.server) as client:
        kept = client.get(f"/v1/memory_stores/{site.archived}/memories/{memory['id']}").json()
        assert kept["content"] == "x\n"
        assert (
            client.get(f"/v1/memory_stores/{site.archived}/memory_versions/{version}").json()[
                "redacted_at"
            ]
            is None
        )


def _as_a_browser_sends(text: str) -> str:
    """A textarea's value as a browser submits it: every line end CRLF."""
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "\r\n")


def _versions(site: Site, memory_id: str) -> list[dict[str, object]]:
    with api(site.server) as client:
        answer = client.get(
            f"/v1/memory_stores/{site.store}/memory_versions", params={"memory_id": memory_id}
        )
    data: list[dict[str, object]] = answer.json()["data"]
    return data


def test_a_save_keeps_the_bytes_sent_and_writes_nothing_unchanged(
    site: Site, admin: httpx.Client
) -> None:
    """Issue 35 item 7: Save without an edit dropped a leading newline, turned CRLF and a
    lone CR into LF, and pushed a new version to every mount."""
    original = "\nfirst\r\nsecond\rthird\n\x01 trailing  \n\n"
    with api(site.server) as client:
        made = client.post(
            f"/v1/memory_stores/{site.store}/memories",
            json={"path": "/bytes/exact.md", "content": original},
        ).json()
    page = admin.get(f"/s/{site.store}/m/{made['id']}")
    # the HTML parser eats one newline after <textarea>: the template gives it one
    assert '<textarea id="edit-content" name="content" rows="14">\n\n' in page.text
    form = {
        "csrf": _csrf(page),
        "sha": made["content_sha256"],
        "version": made["memory_version_id"],
        "content": _as_a_browser_sends(original.replace("\r\n", "\n").replace("\r", "\n")),
    }
    url = f"/s/{site.store}/m/{made['id']}/edit"
    assert admin.post(url, data=form).status_code == 303
    assert len(_versions(site, made["id"])) == 1  # no version for a save without an edit
    with api(site.server) as client:
        stored = client.get(f"/v1/memory_stores/{site.store}/memories/{made['id']}").json()
    assert stored["content"] == original and stored["content_sha256"] == made["content_sha256"]
    # an edit: the lines left alone keep their ends, the new line takes the common one
    edited = {**form, "content": form["content"] + "fourth"}
    assert admin.post(url, data=edited).status_code == 303
    with api(site.server) as client:
        stored = client.get(f"/v1/memory_stores/{site.store}/memories/{made['id']}").json()
    assert stored["content"] == original + "fourth"


def test_content_a_browser_cannot_carry_is_refused_with_the_reason(
    site: Site, admin: httpx.Client
) -> None:
    """A memory holding NUL (the API holds it; a textarea shows U+FFFD) gets no edit
    form, and a forged save is refused; a form that is not UTF-8 is refused, not saved
    with U+FFFD in place of its bytes."""
    with api(site.server) as client:
        made = client.post(
            f"/v1/memory_stores/{site.store}/memories",
            json={"path": "/bytes/nul.md", "content": "a\x00b\n"},
        ).json()
        plain = client.post(
            f"/v1/memory_stores/{site.store}/memories",
            json={"path": "/bytes/plain.md", "content": "plain\n"},
        ).json()
    page = admin.get(f"/s/{site.store}/m/{made['id']}")
    assert 'id="edit-panel"' not in page.text and 'id="not-editable"' in page.text
    csrf = _csrf(page)
    forged = admin.post(
        f"/s/{site.store}/m/{made['id']}/edit",
        data={"csrf": csrf, "sha": made["content_sha256"], "content": "a\ufffdb\r\n"},
    )
    assert forged.status_code == 400 and "NUL characters" in forged.text
    not_utf8 = admin.post(
        f"/s/{site.store}/m/{plain['id']}/edit",
        content=f"csrf={csrf}&sha={plain['content_sha256']}&content=%FF%FE".encode(),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert not_utf8.status_code == 400 and "not UTF-8 text" in not_utf8.text
    with api(site.server) as client:
        for memory, content in ((made, "a\x00b\n"), (plain, "plain\n")):
            stored = client.get(f"/v1/memory_stores/{site.store}/memories/{memory['id']}")
            assert stored.json()["content"] == content


def test_a_revoked_token_is_logged_out(site: Site) -> None:
    token = issue_token(site.server, site.store)
    client = _login(site, token)
    try:
        assert client.get("/").status_code == 200
        token_id = "tok_" + token[len("memfs_tok_") :][:24]
        subprocess.run(
            [sys.executable, "-m", "memfs.cli", "serve", "--db", site.server.db, "token",
             "revoke", token_id],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        eventually(  # the token cache trusts a lookup for 5 s
            lambda: client.get("/").status_code,
            "a revoked token no longer opens the console",
            until=lambda code: code != 200,
            timeout=15,
            interval=0.5,
        )
        assert client.get("/").headers["location"].startswith("/console/login")
    finally:
        client.close()


def test_without_a_key_the_console_is_open_on_loopback(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "open.db").start()
    try:
        with httpx.Client(base_url=server.url + "/console", timeout=10) as client:
            page = client.get("/")
            assert page.status_code == 200 and "Memory stores" in page.text
            assert "memfs_console=" in page.headers["set-cookie"]
            assert client.get("/static/console.css").headers["content-type"].startswith("text/css")
            assert client.get("/static/../app.py").status_code == 404
    finally:
        assert server.stop() == 0


def test_cookieless_requests_never_push_a_session_out(tmp_path: Path) -> None:
    """Issue 35 item 11: each request without a cookie made a session, and 10,001 of
    them flushed every session of a server without a key: the next form post was
    refused (403) and the text typed in it lost."""
    server = ServerProcess(tmp_path / "open.db").start()
    try:
        with api(server) as client:
            sid = client.post("/v1/memory_stores", json={"name": "busy"}).json()["id"]
        person = httpx.Client(base_url=server.url + "/console", timeout=10)
        form = person.get(f"/s/{sid}/new")
        csrf = _csrf(form)
        host, port = server.url.removeprefix("http://").split(":")
        request = f"GET /console/s/{sid}/audit HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
        for _ in range(MAX_SESSIONS // 100 + 1):  # 10,100 requests, 100 pipelined at a time
            with socket.create_connection((host, int(port))) as flood:
                flood.sendall(request * 100)
                answered = 0
                buffer = b""
                while answered < 100:
                    chunk = flood.recv(1 << 20)
                    assert chunk, "the server closed the connection"
                    buffer += chunk
                    answered = buffer.count(b"HTTP/1.1 200")
                assert buffer.count(b"set-cookie: memfs_console=") == 100  # a session each
        saved = person.post(
            f"/s/{sid}/new", data={"path": "/typed.md", "content": "typed text", "csrf": csrf}
        )
        assert saved.status_code == 303, saved.text
        person.close()
        with api(server) as client:
            listed = client.get(f"/v1/memory_stores/{sid}/memories").json()["data"]
        assert [m["path"] for m in listed] == ["/typed.md"]
    finally:
        assert server.stop() == 0


def test_no_console_serves_only_the_api(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "api.db", extra_args=["--no-console"]).start()
    try:
        with api(server) as client:
            gone = client.get("/console/")
            assert gone.status_code == 404
            assert gone.json()["error"]["type"] == "not_found_error"
    finally:
        assert server.stop() == 0


def test_a_console_off_loopback_needs_a_key(tmp_path: Path) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "memfs.cli", "serve", "--db", str(tmp_path / "x.db"),
         "--host", "0.0.0.0", "--port", "0"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "give --api-key, or --no-console" in refused.stderr


def test_rename_and_delete_carry_the_sha(site: Site, admin: httpx.Client) -> None:
    with api(site.server) as client:
        made = client.post(
            f"/v1/memory_stores/{site.store}/memories", json={"path": "/old.md", "content": "a\n"}
        ).json()
    page = admin.get(f"/s/{site.store}/m/{made['id']}")
    csrf, sha = _csrf(page), made["content_sha256"]
    moved = admin.post(
        f"/s/{site.store}/m/{made['id']}/rename",
        data={"path": "/new/place.md", "sha": sha, "csrf": csrf},
    )
    assert moved.status_code == 303
    with api(site.server) as client:
        assert (
            client.get(f"/v1/memory_stores/{site.store}/memories/{made['id']}").json()["path"]
            == "/new/place.md"
        )
        client.post(
            f"/v1/memory_stores/{site.store}/memories/{made['id']}", json={"content": "b\n"}
        ).raise_for_status()
    confirm = admin.get(f"/s/{site.store}/m/{made['id']}/delete")
    assert "Delete /new/place.md?" in confirm.text
    stale = admin.post(
        f"/s/{site.store}/m/{made['id']}/delete", data={"sha": sha, "csrf": csrf}
    )  # the content changed since the page showed it: refused, nothing deleted
    assert stale.status_code == 409
    fresh = re.search(r'name="sha" value="([0-9a-f]{64})"', confirm.text)
    assert fresh is not None
    gone = admin.post(
        f"/s/{site.store}/m/{made['id']}/delete", data={"sha": fresh.group(1), "csrf": csrf}
    )
    assert gone.status_code == 303
    with api(site.server) as client:
        assert (
            client.get(f"/v1/memory_stores/{site.store}/memories/{made['id']}").status_code == 404
        )


def test_an_unchanged_text_keeps_every_line_end_whatever_the_mix() -> None:
    """`keep_line_ends` on what a browser sends back unchanged gives the bytes shown,
    for 2,000 random texts of CRLF, LF, lone CR and blank lines; an added line takes the
    most common end, the first seen on a tie."""
    rng = random.Random(35)
    for _ in range(2000):
        pieces = rng.choices(["a", "b", " ", "", "\r\n", "\n", "\r", "é"], k=rng.randint(0, 40))
        text = "".join(pieces)
        assert keep_line_ends(_as_a_browser_sends(text), text) == text, repr(text)
    assert keep_line_ends("x\r\na\r\nb\r\n", "a\r\nb\n") == "x\r\na\r\nb\n"
    assert keep_line_ends("a\r\nb", None) == "a\nb"  # a new memory: LF
