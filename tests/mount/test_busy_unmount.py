"""`memfs unmount` on a busy mount: refused and explained unless --lazy or --force;
nested mounts are refused or unmounted first (issue 12, item 5)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.files import store_files
from tests.support.mount import MountProcess, is_mounted
from tests.support.server import ServerProcess

pytestmark = pytest.mark.deadline(180)


class Writer:
    """A shell holding `path` open for appending; each line sent is one write(2)."""

    def __init__(self, path: Path) -> None:
        script = 'exec 3>>"$1"; while read -r line; do printf "%s\\n" "$line" >&3 || exit 9; done'
        self.proc = subprocess.Popen(
            ["bash", "-c", script, "writer", str(path)], stdin=subprocess.PIPE, text=True
        )

    def write(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def holders() -> Iterator[list[subprocess.Popen[str] | Writer]]:
    held: list[subprocess.Popen[str] | Writer] = []
    yield held
    for h in held:
        if isinstance(h, Writer):
            h.kill()
        elif h.poll() is None:
            h.kill()
            h.wait()


def wait_for_file(path: Path, text: str) -> None:
    eventually(
        path.read_text,
        f"{path} holds {text!r}",
        until=lambda got: got == text,
        ignoring=(FileNotFoundError,),
        timeout=10,
    )


def test_unmount_refuses_a_busy_mount_naming_what_holds_it(
    mount: MountProcess,
    shared_api: Api,
    store: dict[str, object],
    holders: list[subprocess.Popen[str] | Writer],
) -> None:
    root = mount.mountpoint
    (root / "sub").mkdir()
    shell = subprocess.Popen(["sleep", "300"], cwd=root / "sub", text=True)
    writer = Writer(root / "w.md")
    holders += [shell, writer]
    writer.write("one")
    wait_for_file(root / "w.md", "one\n")

    refused = mount.memfs("unmount", str(root), check=False)
    assert refused.returncode == 1, refused.stderr
    assert "Traceback" not in refused.stderr
    assert f"pid {shell.pid} (sleep): working directory {root}/sub" in refused.stderr
    assert f"pid {writer.proc.pid} (bash): open file {root}/w.md" in refused.stderr
    assert "--lazy" in refused.stderr and "--force" in refused.stderr
    assert is_mounted(root) and mount.proc is not None and mount.proc.poll() is None
    writer.write("two")  # the mount still serves its holders
    wait_for_file(root / "w.md", "one\ntwo\n")
    assert writer.proc.poll() is None

    forced = mount.memfs("unmount", "--force", str(root), check=False)
    assert forced.returncode == 0, forced.stderr
    assert f"pid {writer.proc.pid}" in forced.stderr  # it says whom it cut off
    assert mount.wait(timeout=60) == 0
    assert not is_mounted(root)
    # The final flush ran: the open file's last bytes reached the store.
    assert store_files(shared_api, str(store["id"])) == {"w.md": "one\ntwo\n"}


# Detached, the kernel no longer wants the last holder's RELEASE answer; libfuse logs
# that it could not deliver it. Nothing is lost: the flush below proves it.
@pytest.mark.daemon_log(r"ERROR pyfuse3: fuse_release\(\): fuse_reply_\* failed with No such file")
def test_unmount_lazy_detaches_and_flushes_when_the_last_holder_leaves(
    mount: MountProcess,
    shared_api: Api,
    store: dict[str, object],
    holders: list[subprocess.Popen[str] | Writer],
) -> None:
    root = mount.mountpoint
    writer = Writer(root / "w.md")
    holders.append(writer)
    writer.write("one")
    wait_for_file(root / "w.md", "one\n")

    lazy = mount.memfs("unmount", "--lazy", str(root), check=False)
    assert lazy.returncode == 0, lazy.stderr
    assert "detached" in lazy.stderr and f"pid {writer.proc.pid}" in lazy.stderr
    assert not is_mounted(root)
    writer.write("two")  # the holder keeps working on the detached mount
    assert mount.proc is not None and mount.proc.poll() is None
    assert writer.close() == 0
    assert mount.wait(timeout=60) == 0
    assert "crashed" not in mount.log()
    assert store_files(shared_api, str(store["id"])) == {"w.md": "one\ntwo\n"}


def test_unmount_refuses_a_nested_mount_and_force_unmounts_it_first(
    tmp_path: Path,
    mount: MountProcess,
    shared_server: ServerProcess,
    shared_api: Api,
    store: dict[str, object],
) -> None:
    outer = mount.mountpoint
    (outer / "inner").mkdir()
    inner_store = str(shared_api.create_store("inner")["id"])
    inner = MountProcess(
        ["mount", inner_store, str(outer / "inner"), "--cache-dir", str(tmp_path / "inner-cache")],
        outer / "inner",
        url=shared_server.url,
        log_path=tmp_path / "inner.log",
    ).start()
    try:
        (outer / "a.md").write_text("outer\n")
        (outer / "inner" / "b.md").write_text("inner\n")
        refused = mount.memfs("unmount", str(outer), check=False)
        assert refused.returncode == 1, refused.stderr
        assert f"{outer}/inner" in refused.stderr and "memfs" in refused.stderr
        lazy = mount.memfs("unmount", "--lazy", str(outer), check=False)
        assert lazy.returncode == 1, lazy.stderr
        assert is_mounted(outer) and is_mounted(outer / "inner")
        assert (outer / "inner" / "b.md").read_text() == "inner\n"

        forced = mount.memfs("unmount", "--force", str(outer), check=False)
        assert forced.returncode == 0, forced.stderr
        assert inner.wait(timeout=60) == 0 and mount.wait(timeout=60) == 0
        assert not is_mounted(outer)
        assert store_files(shared_api, inner_store) == {"b.md": "inner\n"}
        assert store_files(shared_api, str(store["id"])) == {"a.md": "outer\n"}
    finally:
        inner.cleanup()
