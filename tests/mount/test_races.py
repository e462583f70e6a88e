"""Races between writers that must not lose a write (issue 36, "Races lose acknowledged
writes"): a real mount with push soon and the watch, another client writing through the
API at the same time, and the write patterns of real tools.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.api import Api
from tests.support.mount import mount_store
from tests.support.server import ServerProcess

pytestmark = pytest.mark.fuse


def _api_writer(api: Api, sid: str, mid: str, stop: threading.Event, every: float) -> int:
    """Rewrite the first line of the memory through the API until told to stop."""
    n = 0
    while not stop.is_set():
        current = api.get_memory(sid, mid)["content"]
        lines = current.split("\n")
        lines[0] = f"api {n}"
        try:
            api.update_memory(
                sid,
                mid,
                content="\n".join(lines),
                precondition={"type": "content_sha256", "content_sha256": _sha(current)},
            )
            n += 1
        except Exception:
            pass  # the mount's push won the race: read again
        stop.wait(every)
    return n


def _sha(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()


def test_vim_saves_racing_an_api_writer_lose_nothing(
    tmp_path: Path, server: ServerProcess, api: Api
) -> None:
    """60 vim saves 50 ms apart while the API rewrites the first line every 150 ms:
    every save is in the file when vim returns, and in the store at the end."""
    assert shutil.which("vim"), "vim is one of scripts/install's packages"
    sid = str(api.create_store("vim-race")["id"])
    mid = api.create_memory(sid, "/notes.md", "api start\nbody\n")["id"]
    mount = mount_store(tmp_path, server.url, sid, name="m")
    f = mount.mountpoint / "notes.md"
    stop = threading.Event()
    writer = threading.Thread(target=_api_writer, args=(api, sid, mid, stop, 0.15))
    writer.start()
    lost_at_once = []
    try:
        for i in range(60):
            done = subprocess.run(
                ["vim", "-u", "NONE", "-N", "-es", "-c", f"$put ='saved {i}'", "-c", "wq", str(f)],
                capture_output=True,
                timeout=30,
            )
            assert done.returncode == 0, done.stderr
            if f"saved {i}\n" not in f.read_text():
                lost_at_once.append(i)
            time.sleep(0.05)
    finally:
        stop.set()
        writer.join(30)
    mount.sync()
    final = api.get_memory(sid, mid)["content"]
    assert lost_at_once == []
    missing = [i for i in range(60) if f"saved {i}\n" not in final]
    assert missing == [], final
