"""Invalid wire data from a hostile server, through a real mount (issue 24 items 5, 12).

A bad record is skipped and logged per memory (never EIO for its whole directory), a
memory whose content does not match its sha is never shown with those bytes (also after
a remount), a read of content that cannot come says why at once, and a server that
repeats its lies every pass does not grow the log.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.hostile import Hostile
from tests.support.mount import mount_store


def _read_errno(path: Path) -> int:
    try:
        path.read_bytes()
    except OSError as e:
        return e.errno or 0
    return 0


def test_invalid_records_are_skipped_per_memory(tmp_path: Path) -> None:
    with Hostile() as srv:
        srv.add("/d/ok.md", "fine\n")
        srv.add("/d/huge.md", "x", size=2**63)
        srv.add("/d/negative.md", "x", size=-5)
        first = srv.add("/d/first.md", "first\n")
        srv.extra.append({**srv.view(first, False), "path": "/d/again.md"})
        srv.add("/d/lying.md", "real\n", sha="a" * 64)
        proc = mount_store(tmp_path, srv.url, srv.store_id, "--sync-interval", "3600")
        d = proc.mountpoint / "d"
        ls = subprocess.run(["ls", "-l", str(d)], capture_output=True, text=True, timeout=30)
        assert ls.returncode == 0, ls.stderr
        assert sorted(os.listdir(d)) == ["first.md", "lying.md", "ok.md"]
        assert (d / "ok.md").read_text() == "fine\n"
        assert (d / "first.md").read_text() == "first\n"
        for _ in range(2):
            t0 = time.monotonic()
            assert _read_errno(d / "lying.md") == errno.EIO
            assert time.monotonic() - t0 < 10, "waited out the content timeout"
        assert (d / "lying.md").stat().st_size == 5  # the listed size, not bytes shown
        log = proc.log()
        for mid in ("mem_000001", "mem_000002"):
            assert re.search(
                rf"skipping it memory_store_id={srv.store_id} memory_id={mid} "
                r"error=\"content_size_bytes is outside 0\.\.102400\"",
                log,
            ), log
        assert (
            f"memory id twice; skipping all but the first memory_store_id={srv.store_id} "
            f"memory_id={first} path=/d/again.md"
        ) in log
        assert "the server's content does not match its sha; ignoring it" in log
        assert re.search(r"read fails with EIO .*path=/d/lying\.md error=\"the server's", log)
        assert "content did not arrive in time" not in log
        assert log.count("path=/d/lying.md error=") == 1  # two reads, one line

        # After a remount the file is still not shown with bytes the store lacks.
        proc.stop()
        proc.start()
        assert sorted(os.listdir(d)) == ["first.md", "lying.md", "ok.md"]
        assert (d / "lying.md").stat().st_size == 5
        assert _read_errno(d / "lying.md") == errno.EIO
        assert not list((tmp_path / "mnt-cache" / "objects").rglob("a" * 64))


@pytest.mark.deadline(180)
def test_a_server_repeating_bad_paths_every_pass_does_not_grow_the_log(tmp_path: Path) -> None:
    """Issue 24 item 5: invalid paths listed again every pass grew the log by a line
    each per pass (46 MB a minute at 5,000); now once per cause, and a count."""
    with Hostile() as srv:
        srv.add("/ok.md", "fine\n")
        for i in range(2000):
            srv.add(f"/bad/{i}//x.md", "x")
        proc = mount_store(tmp_path, srv.url, srv.store_id, "--sync-interval", "3600")
        for _ in range(12):
            assert proc.sync().returncode == 0
        assert srv.listings >= 12
        assert (proc.mountpoint / "ok.md").read_text() == "fine\n"
        lines = [line for line in proc.log().splitlines() if " WARNING " in line]
        invalid = [line for line in lines if "can have; skipping memory_store_id=" in line]
        assert len(invalid) == 100, len(invalid)  # the first 100 causes, once each
        counts = [line for line in lines if "a warning repeated" in line]
        assert [int(line.split("count=")[1].split()[0]) for line in counts][:3] == [10, 100, 1000]
        assert len(counts) <= 5  # 10, 100, 1000, 10000 (and 100000 beyond 50 passes)
        assert all("path no memory can have" in line for line in counts)
