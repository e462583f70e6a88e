"""One damaged byte in a killed mount's extent log (issue 35 item 2): the restart replays
every other record, holds back only the file that lost one (state `refused`, never
pushed shortened), keeps its last good content as a conflict copy, keeps the damaged
log aside, and says so in one warning."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from memfs.state.journal import EXTENT_LOG_NAME
from tests.support.api import Api
from tests.support.files import store_files
from tests.support.mount import MountProcess, cli_ok, xattrs

pytestmark = [pytest.mark.fuse, pytest.mark.deadline(180)]


def test_a_damaged_byte_in_the_extent_log_holds_only_its_file(
    quiet: MountProcess, shared_api: Api, store: dict[str, Any], tmp_path: Path
) -> None:
    sid = str(store["id"])
    root = quiet.mountpoint
    (root / "log.md").write_text("log header\n")
    (root / "other.md").write_text("other header\n")
    quiet.sync()
    lines: dict[str, list[str]] = {"log.md": [], "other.md": []}
    for i in range(41):  # acknowledged appends, each a record in the extent log
        for name in lines:
            line = f"{name} line {i:02d}\n"
            with open(root / name, "a") as f:
                f.write(line)
            lines[name].append(line)
    quiet.kill()  # nothing pushed since the first sync
    log = tmp_path / "mnt-cache" / EXTENT_LOG_NAME
    data = bytearray(log.read_bytes())
    at = data.index(b"log.md line 20\n") + 3  # one byte in the 21st append's payload
    data[at] ^= 0x10
    log.write_bytes(data)

    quiet.cleanup()
    quiet.start()  # the same cache directory
    quiet.expect_exit(1)  # /log.md stays held to the end: the stop names it, exit 1
    assert (root / "other.md").read_text() == "other header\n" + "".join(lines["other.md"])
    hole = "\0" * len(lines["log.md"][20])
    whole = "log header\n" + "".join(lines["log.md"][:20]) + hole + "".join(lines["log.md"][21:])
    assert (root / "log.md").read_text() == whole  # every other append replayed
    attrs = xattrs(root / "log.md")
    assert attrs["user.memfs.state"] == "refused", attrs
    assert EXTENT_LOG_NAME in attrs["user.memfs.refused"], attrs
    assert xattrs(root / "other.md")["user.memfs.state"] in ("dirty", "clean")  # pushed

    quiet.memfs("sync", str(root), check=False)  # a held file is named, not pushed
    assert store_files(shared_api, sid) == {
        "log.md": "log header\n",  # as last pushed: never the shortened file
        "other.md": "other header\n" + "".join(lines["other.md"]),
    }
    answer = json.loads(cli_ok(quiet, "conflicts", str(root), "--json"))
    (kept,) = answer["mounts"][0]["conflicts"]
    assert kept["path"] == "/log.md"
    assert Path(kept["copy"]).read_text() == "log header\n" + "".join(lines["log.md"][:20])
    aside = list(log.parent.glob(EXTENT_LOG_NAME + ".damaged-*"))
    assert [p.read_bytes() for p in aside] == [bytes(data)]  # kept, not cut
    warned = re.findall(
        r"WARNING .*the extent log is damaged.* offset=(\d+) .*files=(\S+) kept=", quiet.log()
    )
    assert len(warned) == 1 and warned[0][1] == "/log.md", quiet.log()
    assert at - 200 < int(warned[0][0]) < at  # the record's start, just before its payload
