"""Every ordinary tool works on a real mount, and the store ends up with exactly the result."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.support.api import Api
from tests.support.files import store_contents
from tests.support.mount import MountProcess


def run(*cmd: str, cwd: Path | None = None, input: str | None = None) -> str:
    result = subprocess.run(
        list(cmd), check=True, capture_output=True, text=True, cwd=cwd, input=input, timeout=30
    )
    return result.stdout


def sh(script: str, cwd: Path) -> str:
    return run("bash", "-euo", "pipefail", "-c", script, cwd=cwd)


def test_shell_tool_table(shared_api: Api, store: dict[str, object], mount: MountProcess) -> None:
    store_id = str(store["id"])
    seeded = {
        p: shared_api.create_memory(store_id, p, c)["id"]
        for p, c in (
            ("/docs/readme.md", "line one\nline two\nneedle here\n"),
            ("/docs/replace-me.md", "old\n"),
            ("/edit/sed.md", "colour\n"),
            ("/edit/python.md", "abcdef\n"),
            ("/edit/save.md", "version 1\n"),
            ("/gone/x.md", "x\n"),
            ("/gone/y/z.md", "z\n"),
            ("/single.md", "single\n"),
            ("/olddir/keep.md", "kept\n"),
        )
    }
    mount.sync()
    root = mount.mountpoint

    # reading
    assert run("cat", str(root / "docs/readme.md")) == "line one\nline two\nneedle here\n"
    assert run("less", "-F", "-X", str(root / "docs/readme.md")).startswith("line one")
    assert run("head", "-n1", str(root / "docs/readme.md")) == "line one\n"
    listing = run("ls", "-la", str(root / "docs"))
    assert "readme.md" in listing and "replace-me.md" in listing
    assert listing.count("-rw-r--r--") == 2
    names = [line.split()[-1] for line in listing.splitlines()[1:]]
    assert names == [".", "..", "readme.md", "replace-me.md"]
    found = run("find", ".", "-name", "*.md", cwd=root).split()
    assert sorted(found) == sorted("./" + p[1:] for p in seeded)
    assert run("grep", "-rl", "needle", ".", cwd=root).split() == ["./docs/readme.md"]
    st = run("stat", "-c", "%s %a %F %U", str(root / "single.md")).split()
    assert st[:3] == ["7", "644", "regular"]
    assert run("stat", "-c", "%a %F", str(root / "docs")).strip() == "755 directory"

    # copying
    run("cp", str(root / "single.md"), str(root / "copy.md"))
    os.utime(root / "single.md", ns=(1_600_000_000_000_000_000,) * 2)
    run("cp", "-p", str(root / "single.md"), str(root / "copy-p.md"))
    assert (root / "copy-p.md").stat().st_mtime_ns == 1_600_000_000_000_000_000
    run("cp", "-a", str(root / "docs"), str(root / "docs-copy"))
    assert (root / "docs-copy/readme.md").read_text() == "line one\nline two\nneedle here\n"

    # moving: a file, over an existing file, a directory
    run("mv", str(root / "copy.md"), str(root / "moved.md"))
    run("mv", str(root / "docs-copy/readme.md"), str(root / "docs/replace-me.md"))
    run("mkdir", "-p", str(root / "deep/a/b/c"))
    run("mv", str(root / "docs-copy"), str(root / "deep/a/b/c/docs-moved"))
    run("mv", str(root / "olddir"), str(root / "renamed"))

    # removing
    run("rm", str(root / "single.md"))
    run("rm", "-r", str(root / "gone"))
    run("mkdir", str(root / "empty-then-gone"))
    run("rmdir", str(root / "empty-then-gone"))

    # writing
    sh(
        "touch touched.md; echo hello > echo.md; echo again >> echo.md; : > colon.md; "
        "echo 'append me' | tee -a echo.md > /dev/null; "
        "printf 0123456789 > trunc.md; truncate -s 4 trunc.md; "
        "sed -i s/colour/color/ edit/sed.md",
        root,
    )
    run(
        sys.executable,
        "-c",
        "import sys\n"
        "with open(sys.argv[1], 'r+') as f:\n"
        "    f.seek(2); f.write('XY'); f.seek(0, 2); f.write('end\\n')\n",
        str(root / "edit/python.md"),
    )
    # an editor's save: write a temp file, fsync, rename it over the original
    run(
        sys.executable,
        "-c",
        "import os, sys\n"
        "p = sys.argv[1]; t = p + '.tmp'\n"
        "with open(t, 'w') as f:\n"
        "    f.write('version 2\\n'); f.flush(); os.fsync(f.fileno())\n"
        "os.rename(t, p)\n",
        str(root / "edit/save.md"),
    )
    assert (root / "edit/save.md").read_text() == "version 2\n"
    assert (root / "echo.md").read_text() == "hello\nagain\nappend me\n"
    assert (root / "trunc.md").read_text() == "0123"
    assert (root / "edit/python.md").read_text() == "abXYef\nend\n"
    assert (root / "touched.md").stat().st_size == 0

    mount.sync()
    contents = store_contents(shared_api, store_id)
    readme = "line one\nline two\nneedle here\n"
    assert contents == {
        "/docs/readme.md": readme,
        "/docs/replace-me.md": readme,
        "/deep/a/b/c/docs-moved/replace-me.md": "old\n",
        "/edit/sed.md": "color\n",
        "/edit/python.md": "abXYef\nend\n",
        "/edit/save.md": "version 2\n",
        "/copy-p.md": "single\n",
        "/moved.md": "single\n",
        "/touched.md": "",
        "/echo.md": "hello\nagain\nappend me\n",
        "/colon.md": "",
        "/trunc.md": "0123",
        "/renamed/keep.md": "kept\n",
    }
    ids = {m["path"]: m["id"] for m in shared_api.list_memories(store_id)}
    # sed -i and the editor's save are updates of the same memory, not new ones
    assert ids["/edit/sed.md"] == seeded["/edit/sed.md"]
    assert ids["/edit/save.md"] == seeded["/edit/save.md"]
    assert ids["/edit/python.md"] == seeded["/edit/python.md"]
    # mv over an existing file continues that memory; a directory rename keeps ids
    assert ids["/docs/replace-me.md"] == seeded["/docs/replace-me.md"]
    assert ids["/renamed/keep.md"] == seeded["/olddir/keep.md"]


def test_low_level_io(shared_api: Api, store: dict[str, object], mount: MountProcess) -> None:
    store_id = str(store["id"])
    root = mount.mountpoint
    path = root / "io.md"
    # O_APPEND, O_TRUNC, sparse writes, fsync
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
    os.write(fd, b"start\n")
    os.fsync(fd)
    os.close(fd)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, b"appended\n")
    os.close(fd)
    assert path.read_bytes() == b"start\nappended\n"
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    assert os.fstat(fd).st_size == 0
    os.pwrite(fd, b"sparse", 10)
    os.fdatasync(fd)
    os.close(fd)
    assert path.read_bytes() == b"\0" * 10 + b"sparse"
    assert path.stat().st_size == 16

    # open-then-unlink: the data stays readable through the open handle
    keep = root / "keep.md"
    keep.write_text("still here\n")
    mount.sync()
    with open(keep) as f:
        os.unlink(keep)
        assert not keep.exists()
        assert f.read() == "still here\n"
    fd = os.open(root / "scratch.md", os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, b"scratch")
    os.unlink(root / "scratch.md")
    assert os.pread(fd, 100, 0) == b"scratch"
    os.write(fd, b" more")
    assert os.pread(fd, 100, 0) == b"scratch more"
    os.close(fd)

    # chmod and utime are accepted and kept locally
    os.chmod(path, 0o600)
    os.utime(path, ns=(1_000_000_000, 2_000_000_000))
    st = path.stat()
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_mtime_ns == 2_000_000_000

    mount.sync()
    assert store_contents(shared_api, store_id) == {"/io.md": "\0" * 10 + "sparse"}
