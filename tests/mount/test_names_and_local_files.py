"""File names and local-only files on a live mount, through real tools (issue 12).

- NAME_MAX: a name over 255 bytes is ENAMETOOLONG at every entry point, while a memory
  whose path has a longer segment (the API allows 1,023 bytes) stays reachable under a
  stable alias, and `memfs store export` writes it under the same alias.
- Editor swap files are local-only: vim's binary `.x.swp` is neither refused nor warned
  about, and the edit vim saves reaches the store.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.files import MARKER, store_files
from tests.support.mount import MountProcess, mount_store, xattrs
from tests.support.refusals import refused, tool_fails
from tests.support.server import ServerProcess

TOO_LONG = "z" * 256
LONGEST = "z" * 252 + ".md"  # 255 bytes: allowed


@pytest.mark.deadline(120)
def test_names_over_255_bytes_are_enametoolong_everywhere(
    shared_api: Api, store: dict[str, object], mount: MountProcess
) -> None:
    root = mount.mountpoint
    (root / "ok.md").write_text("ok\n")
    (root / "d").mkdir()
    tool_fails("touch", str(root / TOO_LONG), message="File name too long")
    tool_fails("mkdir", str(root / TOO_LONG), message="File name too long")
    tool_fails("mv", str(root / "ok.md"), str(root / TOO_LONG), message="File name too long")
    tool_fails("cp", str(root / "ok.md"), str(root / "d" / TOO_LONG), message="File name too long")
    long_multibyte = "é" * 128  # 256 bytes in 128 characters
    for name in (TOO_LONG, long_multibyte, "x" * 1000):
        target = root / name
        refused(errno.ENAMETOOLONG, os.open, target, os.O_CREAT | os.O_WRONLY, 0o644)
        refused(errno.ENAMETOOLONG, os.mkdir, target)
        refused(errno.ENAMETOOLONG, os.rename, root / "ok.md", target)
        refused(errno.ENAMETOOLONG, os.symlink, "ok.md", target)
        refused(errno.ENAMETOOLONG, os.link, root / "ok.md", target)
        refused(errno.ENAMETOOLONG, os.mknod, target, stat.S_IFIFO | 0o644)
        refused(errno.ENAMETOOLONG, os.stat, target)
        refused(errno.ENAMETOOLONG, os.unlink, target)
        refused(errno.ENAMETOOLONG, os.rmdir, target)
    (root / LONGEST).write_text("the longest name\n")
    subprocess.run(["mv", str(root / "ok.md"), str(root / "d" / LONGEST)], check=True)
    assert os.statvfs(root).f_namemax == 255
    mount.sync()
    assert store_files(shared_api, str(store["id"])) == {
        LONGEST: "the longest name\n",
        f"d/{LONGEST}": "ok\n",
    }
    assert "Traceback" not in mount.log()


@pytest.mark.deadline(180)
def test_remote_names_over_255_bytes_are_reachable_under_a_stable_alias(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, object]
) -> None:
    store_id = str(store["id"])
    long_file = "f" * 300 + ".md"
    long_dir = "d" * 400
    file_id = shared_api.create_memory(store_id, "/" + long_file, "long file\n")["id"]
    shared_api.create_memory(store_id, f"/{long_dir}/inner.md", "inner\n")
    mount = mount_store(tmp_path, shared_server.url, store_id)
    try:
        root = mount.mountpoint
        names = sorted(os.listdir(root))
        assert len(names) == 3 and MARKER in names, names
        assert all(len(os.fsencode(n)) <= 255 for n in names), names
        file_alias = next(n for n in names if n.startswith("fff"))
        dir_alias = next(n for n in names if n.startswith("ddd"))
        assert file_alias.endswith(".md") and file_alias != long_file
        # readable, and the real path is one xattr away
        assert (root / file_alias).read_text() == "long file\n"
        assert (
            subprocess.run(
                ["cat", str(root / dir_alias / "inner.md")],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            == "inner\n"
        )
        assert xattrs(root / file_alias)["user.memfs.path"] == "/" + long_file
        assert xattrs(root / dir_alias / "inner.md")["user.memfs.path"] == f"/{long_dir}/inner.md"
        assert "user.memfs.path" not in xattrs(root / MARKER)
        refused(errno.ENAMETOOLONG, os.stat, root / long_file)

        # export writes the same aliases and does not fail
        out = tmp_path / "export"
        result = mount.memfs("store", "export", store_id, str(out), "--json")
        summary = json.loads(result.stdout)
        assert summary["written"] == 2 and summary["refused"] == [], result.stderr
        assert (out / file_alias).read_text() == "long file\n"
        assert (out / dir_alias / "inner.md").read_text() == "inner\n"
        assert "longer than 255 bytes" in result.stderr

        # writes inside an aliased directory keep the real store path
        (root / dir_alias / "new.md").write_text("new\n")
        # the alias is stable (same after a remount) and a rename gives a short name
        assert mount.stop() == 0
        mount = mount_store(tmp_path, shared_server.url, store_id)
        assert sorted(os.listdir(root)) == names
        subprocess.run(["mv", str(root / file_alias), str(root / "short.md")], check=True)
        mount.sync()
        memories = {m["path"]: m["id"] for m in shared_api.list_memories(store_id)}
        assert memories == {
            "/short.md": file_id,
            f"/{long_dir}/inner.md": memories[f"/{long_dir}/inner.md"],
            f"/{long_dir}/new.md": memories[f"/{long_dir}/new.md"],
        }
        assert "Traceback" not in mount.log()
    finally:
        mount.cleanup()


@pytest.mark.deadline(120)
def test_vim_swap_files_are_local_only_and_the_save_reaches_the_store(
    shared_api: Api, store: dict[str, object], mount: MountProcess
) -> None:
    vim = shutil.which("vim")
    assert vim is not None, "scripts/install installs vim"
    root = mount.mountpoint
    (root / "notes.md").write_text("line one\n")
    mount.sync()
    # -n is NOT given: vim writes its binary swap file .notes.md.swp next to the file;
    # :preserve forces every block into it (and fsyncs it) before the save.
    result = subprocess.run(
        [
            vim,
            "-N",
            "-u",
            "NONE",
            "-i",
            "NONE",
            "-es",
            "-c",
            "normal! Goline two",
            "-c",
            "preserve",
            "-c",
            "wq",
            "notes.md",
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert (root / "notes.md").read_text() == "line one\nline two\n"
    # a swap file that stays behind (vim killed) is an ordinary, readable local file
    fd = os.open(root / ".other.md.swp", os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, b"b0VIM 9.0\x00\xff\xfe binary")
    os.fsync(fd)
    os.close(fd)
    assert (root / ".other.md.swp").read_bytes() == b"b0VIM 9.0\x00\xff\xfe binary"
    assert xattrs(root / ".other.md.swp")["user.memfs.state"] != "refused"
    mount.sync()
    assert store_files(shared_api, str(store["id"])) == {"notes.md": "line one\nline two\n"}
    status = mount.memfs("status", str(root), "--json")
    assert json.loads(status.stdout)["mounts"][0]["stores"][0]["refused"] == 0, status.stdout
    log = mount.log()
    assert "not valid UTF-8" not in log, log[-3000:]
    assert "Traceback" not in log
