"""`memfs store …` as a user runs it: real processes against a real `memfs serve`."""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import pty
import random
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import httpx
import pytest

from memfs.cli import store_copy
from memfs.paths import MAX_CONTENT_BYTES, sha256_hex
from memfs.store.client import StoreClient
from memfs.store.connection import ClientConfig, make_http_client
from tests.support.api import Api
from tests.support.server import REPO_ROOT, ServerProcess, start_server


def cli_env(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    env.update(ANTHROPIC_BASE_URL=url, PYTHONUNBUFFERED="1", **extra)
    return env


def memfs(
    url: str, *args: str, env: dict[str, str] | None = None, stdin: Any = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memfs.cli", "store", *args],
        env=env or cli_env(url),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        timeout=timeout,
    )


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    return lines[0]


@pytest.fixture
def store(shared_api: Api) -> str:
    store_id: str = shared_api.create_store("cli store")["id"]
    return store_id


# ------------------------------------------------------------------ simple commands


def test_create_list_show_archive_delete(shared_server: ServerProcess, shared_api: Api) -> None:
    url = shared_server.url
    out = memfs(url, "create", "My Store", "--description", "for tests")
    assert out.returncode == 0, out.stderr
    store_id = out.stdout.strip()
    assert store_id.startswith("memstore_") and out.stderr == ""

    created = json.loads(memfs(url, "create", "Other", "--json").stdout)
    assert created["name"] == "Other" and created["archived_at"] is None

    listed = json.loads(memfs(url, "list", "--json").stdout)
    assert {store_id, created["id"]} <= {s["id"] for s in listed}
    table = memfs(url, "list").stdout
    assert "My Store" in table and store_id in table and table.startswith("ID")

    shared_api.create_memory(store_id, "/a.md", "hello")
    shared_api.create_memory(store_id, "/b/c.md", "")
    shown = json.loads(memfs(url, "show", store_id, "--json").stdout)
    assert (shown["id"], shown["description"], shown["memories"], shown["bytes"]) == (
        store_id,
        "for tests",
        2,
        5,
    )
    assert "memories:    2" in memfs(url, "show", store_id).stdout

    archived = json.loads(memfs(url, "archive", store_id, "--json").stdout)
    assert archived["archived_at"]
    assert store_id not in {s["id"] for s in json.loads(memfs(url, "list", "--json").stdout)}
    assert store_id in {
        s["id"] for s in json.loads(memfs(url, "list", "--archived", "--json").stdout)
    }

    out = memfs(url, "delete", store_id, "--yes", "--json")
    assert out.returncode == 0 and json.loads(out.stdout) == {"id": store_id, "deleted": True}
    assert memfs(url, "show", store_id).returncode == 1


def test_delete_needs_yes_without_a_terminal(shared_server: ServerProcess, store: str) -> None:
    out = memfs(shared_server.url, "delete", store)
    assert out.returncode == 2
    assert "--yes" in one_line(out.stderr)
    assert memfs(shared_server.url, "show", store).returncode == 0


@pytest.mark.parametrize("answer,code", [("n\n", 1), ("yes\n", 0)])
def test_delete_asks_on_a_terminal(
    shared_server: ServerProcess, store: str, answer: str, code: int
) -> None:
    leader, follower = pty.openpty()
    try:
        os.write(leader, answer.encode())
        out = memfs(shared_server.url, "delete", store, stdin=follower)
    finally:
        os.close(follower)
        os.close(leader)
    assert out.returncode == code, out.stderr
    assert "cannot be undone" in out.stderr
    assert memfs(shared_server.url, "show", store).returncode == 1 - code


# ------------------------------------------------------------------ errors and exit codes


def test_unreachable_is_exit_3(tmp_path: Path) -> None:
    server = start_server(tmp_path / "gone.db")
    server.stop()
    out = memfs(server.url, "list")
    assert out.returncode == 3
    assert "cannot reach the store" in one_line(out.stderr)


def test_store_not_found_is_exit_1(shared_server: ServerProcess, tmp_path: Path) -> None:
    for args in (
        ["show", "memstore_nope"],
        ["archive", "memstore_nope"],
        ["delete", "memstore_nope", "--yes"],
        ["export", "memstore_nope", str(tmp_path / "x")],
        ["import", "memstore_nope", str(tmp_path)],
    ):
        out = memfs(shared_server.url, *args)
        assert out.returncode == 1, args
        assert "memory store memstore_nope does not exist" in one_line(out.stderr)


@pytest.mark.parametrize("secret", ["!!!", base64.urlsafe_b64encode(b'{"x": 1}').decode()])
def test_bad_secret_is_exit_2(shared_server: ServerProcess, secret: str) -> None:
    env = cli_env(
        shared_server.url, ANTHROPIC_WORK_SECRET=secret, ANTHROPIC_API_KEY="sk-should-not-be-used"
    )
    out = memfs(shared_server.url, "list", env=env)
    assert out.returncode == 2
    line = one_line(out.stderr)
    assert "ANTHROPIC_WORK_SECRET" in line and secret not in line


def test_credentials(tmp_path: Path) -> None:
    key = "sk-cli-secret-key-1234"
    with start_server(tmp_path / "auth.db", api_key=key) as server:
        out = memfs(server.url, "list", env=cli_env(server.url, ANTHROPIC_API_KEY="sk-bad-key"))
        assert out.returncode == 2
        line = one_line(out.stderr)
        assert "refused the credentials" in line and "sk-bad-key" not in line
        out = memfs(server.url, "list")
        assert out.returncode == 2 and "no credentials were sent" in one_line(out.stderr)
        token = json.dumps({"sessions_token": key}).encode()
        secret = base64.urlsafe_b64encode(token).decode().rstrip("=")
        out = memfs(
            server.url, "create", "x", env=cli_env(server.url, ANTHROPIC_WORK_SECRET=secret)
        )
        assert out.returncode == 0, out.stderr
        out = memfs(server.url, "list", env=cli_env(server.url, ANTHROPIC_AUTH_TOKEN=key))
        assert out.returncode == 0 and "x" in out.stdout


def test_usage_errors(shared_server: ServerProcess, store: str, tmp_path: Path) -> None:
    out = memfs(shared_server.url, "import", store, str(tmp_path / "missing"))
    assert out.returncode == 2 and "not a directory" in one_line(out.stderr)
    out = memfs(shared_server.url, "frobnicate")
    assert out.returncode == 2
    out = memfs(shared_server.url, "list", env=cli_env("ftp://nowhere"))
    assert out.returncode == 2 and "invalid API URL" in one_line(out.stderr)


# ------------------------------------------------------------------ import and export


DIRS = ["notes", "日本語", "émigré", "space dir", "a/b/c/d/e", "deep/x/y", "Ω", "mixed Case"]


def make_tree(root: Path, count: int = 1000, seed: int = 7) -> dict[str, bytes]:
    """A deterministic tree: nested dirs, unicode names, empty and near-limit files."""
    rng = random.Random(seed)
    files: dict[str, bytes] = {}
    alphabet = "abc xyz 0123\n\téü日本😀\r\n\x00"
    for i in range(count):
        directory = rng.choice([*DIRS, ""])
        name = rng.choice(
            [
                f"file-{i}.md",
                f"naïve-{i}.txt",
                f"😀-{i}",
                f".hidden-{i}",
                f"with space {i}.txt",
                f"UPPER-{i}.MD",
            ]
        )
        rel = f"{directory}/{name}" if directory else name
        kind = i % 10
        if kind == 0:
            data = b""
        elif kind == 1:
            data = b"x" * MAX_CONTENT_BYTES
        elif kind == 2:
            data = ("é" * (MAX_CONTENT_BYTES // 2)).encode()
        elif kind == 3:
            data = ("😀" * (MAX_CONTENT_BYTES // 4 - 1) + "abc").encode()
        else:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 3000)))
            data = text.encode()
        assert len(data) <= MAX_CONTENT_BYTES
        files[unicodedata.normalize("NFC", rel)] = data
    files["sub/.anthropic-memory-store"] = b"only the top-level marker is reserved"
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    (root / ".anthropic-memory-store").write_bytes(b"version 1\nmemstore_other")
    (root / "empty dir").mkdir()
    return files


def read_tree(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            full = Path(dirpath) / name
            out[full.relative_to(root).as_posix()] = full.read_bytes()
    return out


def test_import_export_round_trip(
    shared_server: ServerProcess, store: str, shared_api: Api, tmp_path: Path
) -> None:
    url = shared_server.url
    src = tmp_path / "src"
    files = make_tree(src)
    assert len(files) == 1001

    out = memfs(url, "import", store, str(src), "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["created"], summary["updated"], summary["unchanged"]) == (1001, 0, 0)
    assert summary["refused"] == [] and summary["failed"] == []
    assert "\r" not in out.stderr  # no progress bar without a terminal

    remote = {m["path"]: m for m in shared_api.list_memories(store)}
    assert set(remote) == {"/" + rel for rel in files}
    assert all(
        remote["/" + rel]["content_sha256"] == sha256_hex(data) for rel, data in files.items()
    )

    dst = tmp_path / "dst"
    out = memfs(url, "export", store, str(dst), "--json")
    assert out.returncode == 0, out.stderr
    exported = json.loads(out.stdout)
    assert exported["written"] == 1001
    assert exported["bytes"] == sum(len(d) for d in files.values())
    assert read_tree(dst) == files  # byte for byte, same names

    again = json.loads(memfs(url, "import", store, str(src), "--json").stdout)
    assert (again["created"], again["updated"], again["unchanged"]) == (0, 0, 1001)

    changed = sorted(files)[:3]
    for rel in changed:
        (src / rel).write_bytes(b"changed " + rel.encode())
    (src / "brand new.md").write_text("new")
    out = memfs(url, "import", store, str(src))
    assert out.returncode == 0, out.stderr
    assert (
        one_line(out.stdout) == f"{store}: 1 created, 3 updated, 998 unchanged, 0 refused, 0 failed"
    )
    for rel in changed:
        mem = next(m for m in shared_api.list_memories(store) if m["path"] == "/" + rel)
        assert shared_api.get_memory(store, mem["id"])["content"] == "changed " + rel


def test_import_refusals(
    shared_server: ServerProcess, store: str, shared_api: Api, tmp_path: Path
) -> None:
    src = tmp_path / "src"
    (src / "ok").mkdir(parents=True)
    (src / "ok" / "good.md").write_text("fine")
    (src / "ok" / "empty.md").write_bytes(b"")
    (src / "binary.bin").write_bytes(b"\xff\xfe\x00\x01")
    (src / "latin1.txt").write_bytes("café".encode("latin-1"))
    (src / "too-big.txt").write_bytes(b"x" * (MAX_CONTENT_BYTES + 1))
    (src / "link.md").symlink_to(src / "ok" / "good.md")
    (src / "dirlink").symlink_to(src / "ok")
    os.mkfifo(src / "fifo")
    (src / unicodedata.normalize("NFD", "é.md")).write_text("nfd name")
    (src / "ctl\x01.md").write_text("control char")
    deep = src.joinpath(*["d"] * 20)
    deep.mkdir(parents=True)
    (deep / "f.md").write_text("21 segments")
    os.mkdir(os.fsencode(src) + b"/bad\xffname")
    (Path(os.fsdecode(os.fsencode(src) + b"/bad\xffname")) / "x.md").write_text("nope")
    shared_api.create_memory(store, "/conflict", "a file in the store")
    (src / "conflict").mkdir()
    (src / "conflict" / "below.md").write_text("blocked by /conflict")

    out = memfs(shared_server.url, "import", store, str(src), "--json")
    assert out.returncode == 1
    summary = json.loads(out.stdout)
    refused = {r["file"]: r["reason"] for r in summary["refused"]}
    assert refused.keys() == {
        "binary.bin",
        "latin1.txt",
        "too-big.txt",
        "link.md",
        "dirlink",
        "fifo",
        unicodedata.normalize("NFD", "é.md"),
        "ctl\x01.md",
        "/".join(["d"] * 20) + "/f.md",
        "bad\\xffname/x.md",
    }
    assert "UTF-8" in refused["binary.bin"] and "too large" in refused["too-big.txt"]
    assert "symbolic link" in refused["link.md"] and "regular" in refused["fifo"]
    assert "NFC" in refused[unicodedata.normalize("NFD", "é.md")]
    assert [f["file"] for f in summary["failed"]] == ["conflict/below.md"]
    assert summary["created"] == 2
    paths = {m["path"] for m in shared_api.list_memories(store)}
    assert paths == {"/conflict", "/ok/good.md", "/ok/empty.md"}

    human = memfs(shared_server.url, "import", store, str(src))
    assert human.returncode == 1
    assert "refused 10 files the API would reject:" in human.stderr
    assert "  binary.bin: not valid UTF-8 text" in human.stderr
    assert "ctl\\x01.md" in human.stderr and "\x01" not in human.stderr
    assert "bad\\xffname/x.md" in human.stderr


def test_import_into_archived_store(
    shared_server: ServerProcess, store: str, tmp_path: Path
) -> None:
    memfs(shared_server.url, "archive", store)
    (tmp_path / "a.md").write_text("x")
    out = memfs(shared_server.url, "import", store, str(tmp_path))
    assert out.returncode == 1 and "archived" in one_line(out.stderr)


def test_export_never_leaves_dir(
    shared_server: ServerProcess, store: str, shared_api: Api, tmp_path: Path
) -> None:
    shared_api.create_memory(store, "/.anthropic-memory-store", "reserved")
    shared_api.create_memory(store, "/sub/x.md", "through the symlink?")
    shared_api.create_memory(store, "/ok.md", "fine")
    outside = tmp_path / "outside"
    outside.mkdir()
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "sub").symlink_to(outside)
    out = memfs(shared_server.url, "export", store, str(dst), "--json")
    assert out.returncode == 1
    result = json.loads(out.stdout)
    assert result["written"] == 1
    assert {r["path"] for r in result["refused"]} == {"/.anthropic-memory-store", "/sub/x.md"}
    assert list(outside.iterdir()) == []
    assert (dst / "ok.md").read_text() == "fine"
    assert not (dst / ".anthropic-memory-store").exists()
    assert "reserved marker" in out.stderr


# ------------------------------------------------------------------ hostile servers


def everything_under(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def hostile_handler(items: list[dict[str, Any]]) -> Any:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/memories"):
            body = json.dumps({"data": items, "next_page": None})  # "\ud800" escapes
            return httpx.Response(200, content=body.encode())
        return httpx.Response(
            200, json={"id": "memstore_h", "name": "h", "created_at": "", "updated_at": ""}
        )

    return handle


def hostile(path: str, content: str = "x") -> dict[str, Any]:
    data = content.encode("utf-8", "surrogatepass")
    return {
        "type": "memory",
        "id": "mem_" + str(abs(hash(path))),
        "path": path,
        "content": content,
        "content_sha256": sha256_hex(data),
        "content_size_bytes": len(data),
        "memory_version_id": "memver_1",
    }


async def test_export_refuses_hostile_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    items = [
        hostile("/../escape.md"),
        hostile("/a/../../escape2"),
        hostile("//abs"),
        hostile("relative"),
        hostile("/a/./b"),
        hostile("/nul\x00byte"),
        hostile("/esc\x1b[31mred"),
        hostile("/surrogate.md", "a\ud800"),
        hostile("/dir"),
        hostile("/dir/below"),
        hostile("/good/file.md", "ok"),
    ]
    transport = httpx.MockTransport(hostile_handler(items))
    dst = tmp_path / "dst"
    async with make_http_client(ClientConfig("http://h.test"), transport=transport) as http:
        args = argparse.Namespace(store_id="memstore_h", directory=str(dst), json=True)
        code = await store_copy.export_tree(StoreClient(http), args)
    out, err = capsys.readouterr()
    assert code == 1
    result = json.loads(out)
    assert result["written"] == 2  # /dir and /good/file.md
    assert len(result["refused"]) == 9
    assert everything_under(tmp_path) == ["dst", "dst/dir", "dst/good", "dst/good/file.md"]
    assert "\x1b" not in err and "hostile" in err


class FakeTerminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_only_on_a_terminal(tty: bool) -> None:
    stream = FakeTerminal(tty)
    bar = store_copy.Progress("importing", 3, stream)
    for _ in range(3):
        bar.advance()
    bar.close()
    if tty:
        assert stream.getvalue().endswith("\rimporting 3 of 3 files [" + "#" * 20 + "]\n")
    else:
        assert stream.getvalue() == ""
