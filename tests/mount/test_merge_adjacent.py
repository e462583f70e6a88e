"""Two mounts of one store edit neighbouring lines of one memory at the same time (issue 36
item 5): both edits end in the store and in both mounts, and no conflict copy is made.

Before, `sed -i` of lines 10 and 11 on two mounts kept the store's version and put the
other edit in a conflict copy 5 of 5 times (diff3 treats neighbouring changes as one)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.support.api import Api
from tests.support.deadline import eventually
from tests.support.mount import MountProcess, mount_store
from tests.support.server import ServerProcess

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(240)]

LINES = 20


def until(get: Callable[[], str | None], want: str, what: str, within: float = 20.0) -> None:
    """`eventually` `get` gives `want`."""
    eventually(get, what, until=lambda got: got == want, timeout=within)


def text(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def sed(path: Path, script: str) -> None:
    done = subprocess.run(["sed", "-i", script, str(path)], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr


def both_at_once(*calls: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def run(call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def store_status(mount: MountProcess) -> dict[str, Any]:
    (one,) = mount.mount_status()["stores"]
    found: dict[str, Any] = one
    return found


# (sed script in a, sed script in b, the lines after both): neighbouring lines on each
# side, the first two lines, and an edit of the last line next to an append after it.
ROUNDS = [
    ("10s/$/ (a)/", "11s/$/ (b)/", {10: " (a)", 11: " (b)"}),
    ("1s/$/ (a)/", "2s/$/ (b)/", {1: " (a)", 2: " (b)"}),
    (f"{LINES}s/$/ (a)/", "$a appended by b", {LINES: " (a)", LINES + 1: "appended by b"}),
]


def test_neighbouring_lines_edited_in_two_mounts_both_stay(
    tmp_path: Path, shared_server: ServerProcess, shared_api: Api, store: dict[str, Any]
) -> None:
    sid = str(store["id"])
    a = mount_store(tmp_path, shared_server.url, sid, name="a")  # push soon and the watch
    b = mount_store(tmp_path, shared_server.url, sid, name="b")
    fa, fb = a.mountpoint / "checklist.md", b.mountpoint / "checklist.md"
    lines = [f"- [ ] item {i}" for i in range(1, LINES + 1)]
    fa.write_text("".join(x + "\n" for x in lines))

    def in_store() -> str:
        (m,) = shared_api.list_memories(sid)
        content: str = shared_api.get_memory(sid, m["id"])["content"]
        return content

    for script_a, script_b, changed in ROUNDS:
        before = "".join(x + "\n" for x in lines)
        a.sync()
        b.sync()
        until(partial(text, fb), before, "the file reaches b")
        for number, edit in changed.items():
            if number <= len(lines):
                lines[number - 1] += edit
            else:
                lines.append(edit)
        want = "".join(x + "\n" for x in lines)
        both_at_once(partial(sed, fa, script_a), partial(sed, fb, script_b))
        for m in (a, b, a):
            m.sync()
        until(in_store, want, f"both edits in the store ({script_a})")
        for f in (fa, fb):
            until(partial(text, f), want, f"both edits in {f} ({script_a})")
        for m in (a, b):
            assert store_status(m)["conflict_copies"] == [], (script_a, m.log())
